package checkpoint_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/x448/float16"

	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/internal/fixture"
	"github.com/mambago/mambago/mambago/safetensors"
)

func TestConfigForms(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		d, L, E, N, K, R, V      int
		falcon, bias, conv, tied bool
	}{
		{"base", 64, 2, 128, 16, 4, 4, 96, false, false, true, true},
		{"conv3_bias", 64, 2, 128, 16, 3, 5, 96, false, true, false, true},
		{"falcon", 64, 2, 128, 16, 4, 4, 96, true, false, true, true},
		{"original", 64, 2, 128, 16, 4, 4, 96, false, false, true, true},
		{"untied", 64, 2, 128, 16, 4, 4, 96, false, false, true, false},
		{"sharded", 64, 3, 128, 16, 4, 4, 96, false, false, true, true},
	} {
		c, err := checkpoint.ReadConfig(filepath.Join(fixture.Root(), tc.name))
		if err != nil {
			t.Fatal(err)
		}
		got := []int{c.Hidden, c.Layers, c.Inner, c.State, c.ConvKernel, c.DTRank, c.Vocab}
		want := []int{tc.d, tc.L, tc.E, tc.N, tc.K, tc.R, tc.V}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: dims %v, want %v", tc.name, got, want)
				break
			}
		}
		if c.Falcon != tc.falcon || c.UseBias != tc.bias || c.UseConvBias != tc.conv || c.TieEmbeddings != tc.tied {
			t.Errorf("%s: falcon/bias/conv bias/tied = %v %v %v %v", tc.name, c.Falcon, c.UseBias, c.UseConvBias, c.TieEmbeddings)
		}
	}
}

func TestConfigRejects(t *testing.T) {
	for _, js := range []string{
		`{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, "state_size": 257}`,
		`{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, "conv_kernel": 9}`,
		`{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, "conv_kernel": 1}`,
		`{"hidden_size": 0, "num_hidden_layers": 2, "vocab_size": 10}`,
		`{"hidden_size": 64, "vocab_size": 10}`,
		`{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, "layer_norm_epsilon": 0}`,
		`not json`,
		// A value of the wrong type is an error, not a default.
		`{"hidden_size": 64.5, "num_hidden_layers": 2, "vocab_size": 10}`,
		`{"hidden_size": "64", "num_hidden_layers": 2, "vocab_size": 10}`,
		`{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, "use_bias": "yes"}`,
		`{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, "layer_norm_epsilon": "x"}`,
		`{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, "time_step_rank": "four"}`,
		`{"d_model": 64, "n_layer": 2, "vocab_size": 10, "ssm_cfg": {"d_state": [16]}}`,
	} {
		if _, err := checkpoint.ParseConfig([]byte(js)); err == nil {
			t.Errorf("ParseConfig(%s) accepted it", js)
		}
	}
	// Other architectures, whose dimensions alone would pass.
	for js, want := range map[string]string{
		`{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, "intermediate_size": 128}`: `model_type "llama"`,
		`{"model_type": "mamba2", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10}`:                          `model_type "mamba2"`,
		`{"d_model": 64, "n_layer": 2, "vocab_size": 10, "ssm_cfg": {"layer": "Mamba2"}}`:                                `ssm_cfg.layer "Mamba2"`,
	} {
		if _, err := checkpoint.ParseConfig([]byte(js)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConfig(%s) = %v, want an error naming %s", js, err, want)
		}
	}
	for _, js := range []string{
		`{"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10}`,
		`{"d_model": 64, "n_layer": 2, "vocab_size": 10, "ssm_cfg": {"layer": "Mamba1"}}`,
	} {
		if _, err := checkpoint.ParseConfig([]byte(js)); err != nil {
			t.Errorf("ParseConfig(%s): %v", js, err)
		}
	}
	// HF's "auto" rank, a list of end-of-sequence ids (the first, then the
	// rest) and a null field (absent) are all accepted.
	c, err := checkpoint.ParseConfig([]byte(`{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10,
		"time_step_rank": "auto", "eos_token_id": [7, 9, 3], "intermediate_size": null}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.DTRank != 4 || c.EOSTokenID != 7 || !slices.Equal(c.MoreEOSTokenIDs, []int{9, 3}) || c.Inner != 128 {
		t.Errorf("rank %d, eos %d and %v, inner %d; want 4, 7 and [9 3], 128", c.DTRank, c.EOSTokenID,
			c.MoreEOSTokenIDs, c.Inner)
	}
	if _, err := checkpoint.ParseConfig([]byte(`{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10,
		"eos_token_id": [7, "x"]}`)); err == nil {
		t.Error(`eos_token_id [7, "x"]: no error`)
	}
	// The saved type: transformers' "dtype", or earlier "torch_dtype"
	// (torch's name taken too); a config without one names none.
	for js, want := range map[string]string{
		`{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, "dtype": "bfloat16"}`:            "bfloat16",
		`{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, "torch_dtype": "torch.float16"}`: "float16",
		`{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, "torch_dtype": null}`:            "",
		`{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10}`:                                 "",
	} {
		if c, err := checkpoint.ParseConfig([]byte(js)); err != nil || c.DType != want {
			t.Errorf("ParseConfig(%s): dtype %q, %v; want %q", js, c.DType, err, want)
		}
	}
	if _, err := checkpoint.ParseConfig([]byte(`{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, "dtype": 16}`)); err == nil {
		t.Error(`ParseConfig with "dtype": 16 succeeded, want an error`)
	}
	c, err = checkpoint.ParseConfig([]byte(`{"d_model": 80, "n_layer": 3, "vocab_size": 50277, "pad_vocab_size_multiple": 8, "ssm_cfg": {"d_state": 8}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Hidden != 80 || c.Layers != 3 || c.Inner != 160 || c.State != 8 || c.DTRank != 5 || c.Vocab != 50280 {
		t.Errorf("state-spaces config parsed as %+v", c)
	}
}

// copyCase copies a fixture's checkpoint files into a temp folder.
func copyCase(t *testing.T, name string) string {
	t.Helper()
	src, dst := filepath.Join(fixture.Root(), name), t.TempDir()
	entries, _ := os.ReadDir(src)
	for _, e := range entries {
		if e.Name() == "expected.safetensors" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644)
	}
	return dst
}

// readAll returns every tensor of a single-file checkpoint as F32.
func readAll(t *testing.T, path string) map[string]safetensors.Tensor {
	t.Helper()
	ts, err := fixture.ReadAll(path)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestBadCheckpointNamesEveryProblem(t *testing.T) {
	dir := copyCase(t, "base")
	path := filepath.Join(dir, "model.safetensors")
	ts := readAll(t, path)
	delete(ts, "backbone.layers.1.mixer.D")
	ts["backbone.layers.0.mixer.extra_thing"] = safetensors.Tensor{DType: safetensors.F32, Shape: []int{2}, Data: []float32{1, 2}}
	ts["backbone.norm_f.weight"] = safetensors.Tensor{DType: safetensors.F32, Shape: []int{63}, Data: make([]float32, 63)}
	if err := safetensors.Write(path, ts); err != nil {
		t.Fatal(err)
	}
	_, err := checkpoint.Load(dir)
	if err == nil {
		t.Fatal("bad checkpoint loaded")
	}
	for _, want := range []string{path, "missing backbone.layers.1.mixer.D [128]", "unexpected tensor backbone.layers.0.mixer.extra_thing",
		"backbone.norm_f.weight has shape [63], want [64]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestCorruptFilesGiveErrors(t *testing.T) {
	dir := copyCase(t, "base")
	path := filepath.Join(dir, "model.safetensors")
	good, _ := os.ReadFile(path)
	for name, data := range map[string][]byte{
		"empty":       {},
		"short":       good[:5],
		"huge header": append([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, good[8:]...),
		"truncated":   good[:len(good)/2],
		"bad json":    append(append([]byte{}, good[:8]...), make([]byte, len(good)-8)...),
	} {
		os.WriteFile(path, data, 0o644)
		if _, err := checkpoint.Load(dir); err == nil {
			t.Errorf("%s file loaded", name)
		} else if !strings.Contains(err.Error(), "model.safetensors") {
			t.Errorf("%s: error %q does not name the file", name, err)
		}
	}
	os.Remove(filepath.Join(dir, "config.json"))
	if _, err := checkpoint.Load(dir); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("missing config.json: %v", err)
	}
}

// TestHalfPrecisionEqualsUpcast stores the base fixture in BF16 and F16 and
// checks that each loads to exactly its float32 upcast.
func TestHalfPrecisionEqualsUpcast(t *testing.T) {
	orig, err := checkpoint.Load(filepath.Join(fixture.Root(), "base"))
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []safetensors.DType{safetensors.BF16, safetensors.F16} {
		half, up := t.TempDir(), t.TempDir()
		if err := fixture.CopyAs("base", half, dt, false); err != nil {
			t.Fatal(err)
		}
		if err := fixture.CopyAs("base", up, dt, true); err != nil {
			t.Fatal(err)
		}
		a, err := checkpoint.Load(half)
		if err != nil {
			t.Fatal(err)
		}
		b, err := checkpoint.Load(up)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.Embeddings, b.Embeddings) || !slices.Equal(a.Layers[1].InProj, b.Layers[1].InProj) || !slices.Equal(a.Layers[0].A, b.Layers[0].A) {
			t.Errorf("%s weights differ from their f32 upcast", dt)
		}
		if slices.Equal(a.Layers[0].InProj, orig.Layers[0].InProj) {
			t.Errorf("%s weights were not rounded at all", dt)
		}
	}
}

// TestFromTensorsMatchesLoad gives every single-file fixture's tensors to
// FromTensors as a state dict would hold them and checks the Weights equal
// Load's, and that the given slices are left as they were.
func TestFromTensorsMatchesLoad(t *testing.T) {
	for _, name := range []string{"base", "conv3_bias", "falcon", "original", "untied", "features", "mambamodel", "bf16"} {
		dir := filepath.Join(fixture.Root(), name)
		want, err := checkpoint.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		tensors := map[string]checkpoint.Tensor{}
		before := map[string][]float32{}
		for n, v := range readAll(t, filepath.Join(dir, "model.safetensors")) {
			tensors[n] = checkpoint.Tensor{Shape: v.Shape, Data: v.Data}
			before[n] = slices.Clone(v.Data)
		}
		got, err := checkpoint.FromTensors(want.Config, tensors)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: FromTensors' weights differ from Load's", name)
		}
		for n, v := range tensors {
			if !slices.Equal(v.Data, before[n]) {
				t.Errorf("%s: FromTensors changed %s", name, n)
			}
		}
	}
}

// TestFromTensorsNamesEveryProblem: a missing tensor, an extra one, a
// mis-shaped one and one whose values do not fill its shape, all in one
// error that says it is the state dict.
func TestFromTensorsNamesEveryProblem(t *testing.T) {
	dir := filepath.Join(fixture.Root(), "base")
	cfg, err := checkpoint.ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	tensors := map[string]checkpoint.Tensor{}
	for n, v := range readAll(t, filepath.Join(dir, "model.safetensors")) {
		tensors[n] = checkpoint.Tensor{Shape: v.Shape, Data: v.Data}
	}
	delete(tensors, "backbone.layers.1.mixer.D")
	tensors["backbone.layers.0.mixer.extra_thing"] = checkpoint.Tensor{Shape: []int{2}, Data: []float32{1, 2}}
	tensors["backbone.norm_f.weight"] = checkpoint.Tensor{Shape: []int{63}, Data: make([]float32, 63)}
	tensors["backbone.layers.0.mixer.D"] = checkpoint.Tensor{Shape: []int{128}, Data: make([]float32, 100)}
	_, err = checkpoint.FromTensors(cfg, tensors)
	if err == nil {
		t.Fatal("a bad state dict loaded")
	}
	for _, want := range []string{"state dict", "missing backbone.layers.1.mixer.D [128]",
		"unexpected tensor backbone.layers.0.mixer.extra_thing (in the state dict)",
		"backbone.norm_f.weight has shape [63], want [64]", "backbone.layers.0.mixer.D has 100 values for shape [128]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestCloneIsDeep: a clone equals its source, shares none of its memory,
// keeps the head tied where it was, and covers every tensor field (a new
// field of Weights or Layer must join Clone's list).
func TestCloneIsDeep(t *testing.T) {
	for _, name := range []string{"base", "untied", "features"} {
		w, err := checkpoint.Load(filepath.Join(fixture.Root(), name))
		if err != nil {
			t.Fatal(err)
		}
		c := w.Clone()
		if !reflect.DeepEqual(c, w) || c.Tied() != w.Tied() {
			t.Fatalf("%s: the clone differs (tied %v, source %v)", name, c.Tied(), w.Tied())
		}
		for field, shared := range sharedFields(w, c) {
			if slices.Contains(shared, true) {
				t.Errorf("%s: the clone shares %s", name, field)
			}
		}
	}
}

// TestLoadNarrowed loads fixtures of every kind (f32 and bf16 files; a tied
// and an untied head; input_proj) narrowed to bfloat16 and to float16: each
// weight matrix is Load's float32 rounded to that type, its float32 field
// is nil, every other tensor is Load's, the head is tied where Load's is,
// and a clone is deep. A type that is not 16-bit is an error.
func TestLoadNarrowed(t *testing.T) {
	narrow := map[safetensors.DType]func(float32) uint16{
		safetensors.BF16: safetensors.BF16Bits,
		safetensors.F16:  func(v float32) uint16 { return float16.Fromfloat32(v).Bits() },
	}
	for _, name := range []string{"base", "bf16", "untied", "features"} {
		dir := filepath.Join(fixture.Root(), name)
		want, err := checkpoint.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		for dt, round := range narrow {
			got, err := checkpoint.LoadNarrowed(dir, dt)
			if err != nil {
				t.Fatal(err)
			}
			n := got.Narrowed
			if n == nil || n.DType != dt || n.Tied() != want.Tied() {
				t.Fatalf("%s as %s: Narrowed %+v, tied %v", name, dt, n, want.Tied())
			}
			pairs := map[string][2]any{
				"embeddings": {n.Embeddings, want.Embeddings}, "lm_head": {n.LMHead, want.LMHead},
				"input_proj": {n.InputProj, want.InputProj},
			}
			for i, l := range n.Layers {
				wl := want.Layers[i]
				pairs[fmt.Sprintf("layer %d in_proj", i)] = [2]any{l.InProj, wl.InProj}
				pairs[fmt.Sprintf("layer %d x_proj", i)] = [2]any{l.XProj, wl.XProj}
				pairs[fmt.Sprintf("layer %d dt_proj", i)] = [2]any{l.DTProj, wl.DTProj}
				pairs[fmt.Sprintf("layer %d out_proj", i)] = [2]any{l.OutProj, wl.OutProj}
			}
			for what, p := range pairs {
				bits, wide := p[0].([]uint16), p[1].([]float32)
				if len(bits) != len(wide) {
					t.Fatalf("%s as %s: %s has %d values, want %d", name, dt, what, len(bits), len(wide))
				}
				for i, v := range wide {
					if bits[i] != round(v) {
						t.Fatalf("%s as %s: %s[%d] = %#04x, want %#04x", name, dt, what, i, bits[i], round(v))
					}
				}
			}
			rest := want.Clone()
			rest.Embeddings, rest.LMHead, rest.InputProj = nil, nil, nil
			for i := range rest.Layers {
				l := &rest.Layers[i]
				l.InProj, l.XProj, l.DTProj, l.OutProj = nil, nil, nil, nil
			}
			rest.Narrowed = n
			if !reflect.DeepEqual(got, rest) {
				t.Errorf("%s as %s: the float32 tensors differ from Load's", name, dt)
			}
			c := got.Clone()
			if !reflect.DeepEqual(c, got) || c.Narrowed.Tied() != n.Tied() ||
				&c.Narrowed.Embeddings[0] == &n.Embeddings[0] || &c.Narrowed.Layers[1].OutProj[0] == &n.Layers[1].OutProj[0] {
				t.Errorf("%s as %s: the clone of narrowed weights is not a deep copy", name, dt)
			}
		}
	}
	if _, err := checkpoint.LoadNarrowed(filepath.Join(fixture.Root(), "base"), safetensors.F32); err == nil {
		t.Error("narrowing to F32 loaded")
	}
}

// TestCloneSmall: the copy equals its source, shares exactly the weight
// matrices with it (the embeddings, the LM head, input_proj, and each
// layer's in_proj, x_proj, dt_proj and out_proj), and copies every other
// tensor.
func TestCloneSmall(t *testing.T) {
	matrices := map[string]bool{"Embeddings": true, "LMHead": true, "InputProj": true,
		"InProj": true, "XProj": true, "DTProj": true, "OutProj": true}
	for _, name := range []string{"base", "untied", "features"} {
		w, err := checkpoint.Load(filepath.Join(fixture.Root(), name))
		if err != nil {
			t.Fatal(err)
		}
		c := w.CloneSmall()
		if !reflect.DeepEqual(c, w) {
			t.Fatalf("%s: the copy differs", name)
		}
		for field, shared := range sharedFields(w, c) {
			if slices.Contains(shared, !matrices[field]) {
				t.Errorf("%s: %s shared %v, want %v", name, field, shared, matrices[field])
			}
		}
	}
}

// sharedFields tells, for each non-empty float32 tensor field of Weights
// and of its first two layers (by field name, once a layer), whether a and
// b share its memory.
func sharedFields(a, b *checkpoint.Weights) map[string][]bool {
	out := map[string][]bool{}
	for _, pair := range [][2]any{{a, b}, {&a.Layers[0], &b.Layers[0]}, {&a.Layers[1], &b.Layers[1]}} {
		x, y := reflect.ValueOf(pair[0]).Elem(), reflect.ValueOf(pair[1]).Elem()
		for i := range x.NumField() {
			f := x.Field(i)
			if f.Type() != reflect.TypeOf([]float32(nil)) || f.Len() == 0 {
				continue
			}
			name := x.Type().Field(i).Name
			out[name] = append(out[name], f.Pointer() == y.Field(i).Pointer())
		}
	}
	return out
}

// TestFromTensors16 gives the bf16 fixture's tensors to FromTensors as
// their 16-bit bits, as the Python bindings pass a bf16 state dict: the
// Weights equal Load's (widened exactly), and narrowed they equal
// LoadNarrowed's to either type, holding copies of the given bits. A
// tensor of another dtype is a problem the error names.
func TestFromTensors16(t *testing.T) {
	dir := filepath.Join(fixture.Root(), "bf16")
	f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tensors := map[string]checkpoint.Tensor{}
	for _, n := range f.Names() {
		info, _ := f.Info(n)
		bits, err := f.Bits16(n, safetensors.BF16)
		if err != nil {
			t.Fatal(err)
		}
		tensors[n] = checkpoint.Tensor{Shape: info.Shape, Bits: bits, DType: safetensors.BF16}
	}
	cfg, err := checkpoint.ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := checkpoint.FromTensors(cfg, tensors)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("FromTensors of bf16 bits differs from Load (err %v)", err)
	}
	for _, dt := range []safetensors.DType{safetensors.BF16, safetensors.F16} {
		want, err := checkpoint.LoadNarrowed(dir, dt)
		if err != nil {
			t.Fatal(err)
		}
		got, err := checkpoint.FromTensorsNarrowed(cfg, tensors, dt)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("FromTensorsNarrowed(%s) of bf16 bits differs from LoadNarrowed (err %v)", dt, err)
		}
		if dt == safetensors.BF16 && &got.Narrowed.Layers[0].InProj[0] == &tensors["backbone.layers.0.mixer.in_proj.weight"].Bits[0] {
			t.Fatal("FromTensorsNarrowed kept the caller's bits instead of a copy")
		}
	}
	bad := tensors["backbone.norm_f.weight"]
	bad.DType = "I32"
	tensors["backbone.norm_f.weight"] = bad
	if _, err := checkpoint.FromTensors(cfg, tensors); err == nil || !strings.Contains(err.Error(), "norm_f.weight has dtype I32") {
		t.Fatalf("a tensor of dtype I32: err = %v", err)
	}
}

// TestLoadPutsMatricesInOneSlab: a load from files lays the weight
// matrices side by side in one buffer (hugemem.Bytes), in the loader's
// order, each on the next 64-byte line, as float32 and narrowed; so do a
// clone's float32 matrices and a state dict's narrowed ones (whose float32
// ones the Weights keep as given). The values are checked against the
// state dict's build in TestFromTensorsMatchesLoad, TestLoadNarrowed,
// TestFromTensors16 and TestCloneIsDeep.
func TestLoadPutsMatricesInOneSlab(t *testing.T) {
	for _, name := range []string{"base", "untied", "features"} {
		dir := filepath.Join(fixture.Root(), name)
		loaded, err := checkpoint.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		narrowed, err := checkpoint.LoadNarrowed(dir, safetensors.BF16)
		if err != nil {
			t.Fatal(err)
		}
		tensors := map[string]checkpoint.Tensor{}
		for n, v := range readAll(t, filepath.Join(dir, "model.safetensors")) {
			tensors[n] = checkpoint.Tensor{Shape: v.Shape, Data: v.Data}
		}
		fromDict, err := checkpoint.FromTensorsNarrowed(loaded.Config, tensors, safetensors.F16)
		if err != nil {
			t.Fatal(err)
		}
		for what, spans := range map[string][]span{
			"Load": floatSpans(loaded), "Load's clone": floatSpans(loaded.Clone()),
			"LoadNarrowed": bitSpans(narrowed.Narrowed), "a state dict narrowed": bitSpans(fromDict.Narrowed),
		} {
			if len(spans) < 5 {
				t.Fatalf("%s, %s: %d matrices", name, what, len(spans))
			}
			for i := 1; i < len(spans); i++ {
				end := spans[i-1].at + spans[i-1].bytes
				if gap := spans[i].at - end; spans[i].at < end || gap >= 64 || spans[i].at%64 != 0 {
					t.Fatalf("%s, %s: matrix %d at %#x, the one before ends at %#x", name, what, i, spans[i].at, end)
				}
			}
		}
	}
}

// floatSpans is matrixSpans of w's float32 matrices.
func floatSpans(w *checkpoint.Weights) []span {
	layers := make([][4][]float32, len(w.Layers))
	for i, l := range w.Layers {
		layers[i] = [4][]float32{l.InProj, l.XProj, l.DTProj, l.OutProj}
	}
	return matrixSpans(w.Embeddings, w.LMHead, w.InputProj, w.Tied(), layers)
}

// bitSpans is matrixSpans of n's 16-bit matrices.
func bitSpans(n *checkpoint.Narrowed) []span {
	layers := make([][4][]uint16, len(n.Layers))
	for i, l := range n.Layers {
		layers[i] = [4][]uint16{l.InProj, l.XProj, l.DTProj, l.OutProj}
	}
	return matrixSpans(n.Embeddings, n.LMHead, n.InputProj, n.Tied(), layers)
}

// span is where a matrix's values lie in memory.
type span struct{ at, bytes uintptr }

// matrixSpans lists the weight matrices' spans in the loader's order: the
// embeddings, the LM head unless tied, input_proj where there is one, and
// each layer's four projections.
func matrixSpans[T float32 | uint16](emb, head, inputProj []T, tied bool, layers [][4][]T) []span {
	ms := [][]T{emb}
	if !tied {
		ms = append(ms, head)
	}
	ms = append(ms, inputProj)
	for _, l := range layers {
		ms = append(ms, l[:]...)
	}
	var spans []span
	for _, m := range ms {
		if len(m) > 0 {
			spans = append(spans, span{uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)) * unsafe.Sizeof(m[0])})
		}
	}
	return spans
}
