package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/mambago/mambago/mambago/safetensors"
)

// Layer holds one Mamba block's weights in float32, row-major, in the
// PyTorch shapes given beside each field (E = d_inner, R = dt rank, N = d_state).
type Layer struct {
	Norm     []float32 // [d]          norm.weight
	InProj   []float32 // [2E, d]      in_proj.weight
	InBias   []float32 // [2E]         in_proj.bias, nil without use_bias
	Conv     []float32 // [E, K]       conv1d.weight [E,1,K]
	ConvBias []float32 // [E]          conv1d.bias, nil without use_conv_bias
	XProj    []float32 // [R+2N, E]    x_proj.weight
	DTProj   []float32 // [E, R]       dt_proj.weight
	DTBias   []float32 // [E]          dt_proj.bias
	A        []float32 // [E, N]       -exp(A_log)
	D        []float32 // [E]          D
	OutProj  []float32 // [d, E]       out_proj.weight
	OutBias  []float32 // [d]          out_proj.bias, nil without use_bias
}

// Weights is a whole model in float32.
type Weights struct {
	Config     Config
	Embeddings []float32 // [V, d]
	Layers     []Layer
	NormF      []float32 // [d]
	LMHead     []float32 // [V, d]; the same slice as Embeddings when tied
	InputProj  []float32 // [d, F], nil when the checkpoint has none
	InputBias  []float32 // [d], nil when absent
	// Narrowed, where LoadNarrowed filled it, holds the weight matrices
	// (Embeddings, LMHead, InputProj and each layer's InProj, XProj, DTProj
	// and OutProj) as 16-bit values, and those float32 fields are nil.
	Narrowed *Narrowed
}

// Narrowed is a model's weight matrices as 16-bit values (bfloat16 or IEEE
// half), in the shapes of their Weights fields, for an engine that keeps
// them so (cpu.NewStored): LoadNarrowed never holds more than one of them
// as float32.
type Narrowed struct {
	DType      safetensors.DType // BF16 or F16
	Embeddings []uint16
	LMHead     []uint16 // the same slice as Embeddings when tied
	InputProj  []uint16 // nil when the checkpoint has none
	Layers     []NarrowedLayer
}

// NarrowedLayer is one layer's weight matrices as 16-bit values.
type NarrowedLayer struct {
	InProj, XProj, DTProj, OutProj []uint16
}

// Tied reports whether the LM head is the embedding table itself.
func (n *Narrowed) Tied() bool {
	return len(n.LMHead) > 0 && len(n.Embeddings) > 0 && &n.LMHead[0] == &n.Embeddings[0]
}

// Clone returns a deep copy of w, tied as w is (LMHead the same slice as
// Embeddings where w's are).
func (w *Weights) Clone() *Weights {
	c := *w
	c.Layers = slices.Clone(w.Layers)
	tied := w.Tied()
	if tied {
		c.LMHead = nil // one copy of the table, below
	}
	matrices := c.matrices()
	cloneIntoSlab(matrices)
	for _, p := range c.Tensors() {
		if !slices.Contains(matrices, p) {
			*p = slices.Clone(*p)
		}
	}
	if tied {
		c.LMHead = c.Embeddings
	}
	if n := w.Narrowed; n != nil {
		nc := *n
		nc.Layers = slices.Clone(n.Layers)
		nc.Embeddings, nc.InputProj = slices.Clone(n.Embeddings), slices.Clone(n.InputProj)
		nc.LMHead = nc.Embeddings
		if !n.Tied() {
			nc.LMHead = slices.Clone(n.LMHead)
		}
		for i := range nc.Layers {
			l := &nc.Layers[i]
			l.InProj, l.XProj, l.DTProj, l.OutProj = slices.Clone(l.InProj), slices.Clone(l.XProj),
				slices.Clone(l.DTProj), slices.Clone(l.OutProj)
		}
		c.Narrowed = &nc
	}
	return &c
}

// CloneSmall is Clone but for the weight matrices (those Narrowed holds:
// the embeddings, the LM head, input_proj and each layer's in_proj, x_proj,
// dt_proj and out_proj), which the copy shares with w, float32 fields and
// Narrowed alike: for an engine that copies the float32 matrices itself,
// from weights it borrows for the call (Narrowed's are the loader's own).
func (w *Weights) CloneSmall() *Weights {
	c := *w
	c.Layers = slices.Clone(w.Layers)
	shared := map[*[]float32]bool{&c.Embeddings: true, &c.LMHead: true, &c.InputProj: true}
	for i := range c.Layers {
		l := &c.Layers[i]
		shared[&l.InProj], shared[&l.XProj], shared[&l.DTProj], shared[&l.OutProj] = true, true, true, true
	}
	for _, p := range c.Tensors() {
		if !shared[p] {
			*p = slices.Clone(*p)
		}
	}
	return &c
}

// Tensors points at every float32 tensor field of w: the model's, then
// each layer's (nil ones included).
func (w *Weights) Tensors() []*[]float32 {
	ts := []*[]float32{&w.Embeddings, &w.NormF, &w.LMHead, &w.InputProj, &w.InputBias}
	for i := range w.Layers {
		l := &w.Layers[i]
		ts = append(ts, &l.Norm, &l.InProj, &l.InBias, &l.Conv, &l.ConvBias, &l.XProj, &l.DTProj, &l.DTBias,
			&l.A, &l.D, &l.OutProj, &l.OutBias)
	}
	return ts
}

// Tied reports whether the LM head is the embedding table itself.
func (w *Weights) Tied() bool {
	return len(w.LMHead) > 0 && len(w.Embeddings) > 0 && &w.LMHead[0] == &w.Embeddings[0]
}

// spec is one tensor the loader expects: its name, shape, where it goes
// (dst16 too for a weight matrix, where it goes narrowed), and whether its
// absence is an error.
type spec struct {
	name     string
	shape    []int
	dst      *[]float32
	dst16    *[]uint16
	optional bool
}

// tensor is one named tensor of a checkpoint: its shape, where it is (for
// errors), reads that give it as float32 and as 16-bit values of a type
// (BF16 or F16), and, for a mapped file's, what releases its pages once
// read (safetensors.File.Release).
type tensor struct {
	shape   []int
	in      string
	read    func() ([]float32, error)
	release func()
	// readInto, where set (a file's tensors), is read into a slice the
	// loader gives, and read16Into reads the tensor as 16-bit values of a
	// type (BF16 or F16): the weight matrices' place in the load's slab
	// (hugemem.Bytes).
	readInto   func(dst []float32) error
	read16Into func(dt safetensors.DType, dst []uint16) error
}

// Load reads the model in dir: config.json plus model.safetensors, or the
// shards listed in model.safetensors.index.json. Every tensor is converted to
// float32 straight from the memory-mapped files. A bad checkpoint gives one
// error that names the files and every missing, extra or mis-shaped tensor.
func Load(dir string) (*Weights, error) { return LoadNarrowed(dir, "") }

// LoadNarrowed is Load that, for dt BF16 or F16, converts the weight
// matrices straight from the files to 16-bit values of dt (w.Narrowed;
// exact where the file holds dt) and the rest to float32, so that no more
// than one tensor is ever held as float32. dt "" is Load.
func LoadNarrowed(dir string, dt safetensors.DType) (*Weights, error) {
	if dt != "" && dt != safetensors.BF16 && dt != safetensors.F16 {
		return nil, fmt.Errorf("checkpoint: narrowing to %s, want BF16 or F16", dt)
	}
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	files, err := openFiles(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	tensors := map[string]tensor{}
	var problems, paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
		for _, n := range f.Names() {
			if t, dup := tensors[n]; dup {
				problems = append(problems, fmt.Sprintf("%s is in both %s and %s", n, t.in, filepath.Base(f.Path)))
			}
			info, _ := f.Info(n)
			tensors[n] = tensor{shape: info.Shape, in: filepath.Base(f.Path),
				read:       func() ([]float32, error) { return f.Float32(n) },
				release:    func() { f.Release(n) },
				readInto:   func(dst []float32) error { return f.Float32Into(n, dst) },
				read16Into: func(dt safetensors.DType, dst []uint16) error { return f.Bits16Into(n, dt, dst) }}
		}
	}
	return build(cfg, tensors, problems, "checkpoint "+strings.Join(paths, ", "), dt)
}

// Tensor is one tensor in memory: its row-major shape and its values,
// float32 in Data, or (DType BF16 or F16) 16-bit values in Bits.
type Tensor struct {
	Shape []int
	Data  []float32
	Bits  []uint16
	DType safetensors.DType // "" or F32 for Data; BF16 or F16 for Bits
}

// FromTensors builds a model's Weights from tensors in memory, named as a
// PyTorch state_dict of MambaForCausalLM, MambaModel or the state-spaces
// models names them, with the same checks as Load. The Weights keep the
// given float32 slices (A is computed into its own), so the caller must
// not change them afterwards; 16-bit tensors are widened into new ones.
func FromTensors(cfg Config, tensors map[string]Tensor) (*Weights, error) {
	return FromTensorsNarrowed(cfg, tensors, "")
}

// FromTensorsNarrowed is FromTensors that, for dt BF16 or F16, puts the
// weight matrices in w.Narrowed as dt, as LoadNarrowed does: copies of
// those given in dt, the others rounded, never widened to float32 first.
func FromTensorsNarrowed(cfg Config, tensors map[string]Tensor, dt safetensors.DType) (*Weights, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if dt != "" && dt != safetensors.BF16 && dt != safetensors.F16 {
		return nil, fmt.Errorf("checkpoint: narrowing to %s, want BF16 or F16", dt)
	}
	refs := make(map[string]tensor, len(tensors))
	var problems []string
	for n, t := range tensors {
		want := 1
		for _, d := range t.Shape {
			want *= d
		}
		half := t.DType == safetensors.BF16 || t.DType == safetensors.F16
		have := len(t.Data)
		if half {
			have = len(t.Bits)
		}
		switch {
		case !half && t.DType != "" && t.DType != safetensors.F32:
			problems = append(problems, fmt.Sprintf("%s has dtype %s, want F32, BF16 or F16", n, t.DType))
			continue
		case want != have || slices.ContainsFunc(t.Shape, func(d int) bool { return d < 0 }):
			problems = append(problems, fmt.Sprintf("%s has %d values for shape %v", n, have, t.Shape))
			continue
		}
		read := func() ([]float32, error) { return t.Data, nil }
		if half {
			read = func() ([]float32, error) { return safetensors.Widen(t.Bits, t.DType), nil }
		}
		read16Into := func(to safetensors.DType, dst []uint16) error {
			if half && t.DType == to {
				copy(dst, t.Bits)
				return nil
			}
			v, _ := read()
			safetensors.NarrowInto(dst, v, to)
			return nil
		}
		refs[n] = tensor{shape: t.Shape, in: "the state dict", read: read, read16Into: read16Into}
	}
	return build(cfg, refs, problems, "state dict", dt)
}

// build gathers the Weights cfg describes from tensors, adding every
// missing, extra or mis-shaped one to problems; with any problem it fails,
// naming what (the files, or the state dict). With narrow (BF16 or F16) the
// weight matrices go to w.Narrowed as that type (tensor.read16Into).
func build(cfg Config, tensors map[string]tensor, problems []string, what string, narrow safetensors.DType) (*Weights, error) {
	w := &Weights{Config: cfg}
	n16 := &Narrowed{DType: narrow, Layers: make([]NarrowedLayer, cfg.Layers)}
	// MambaForCausalLM and state-spaces checkpoints prefix the body with
	// "backbone."; a MambaModel saved on its own does not.
	prefix := ""
	for n := range tensors {
		if strings.HasPrefix(n, "backbone.") {
			prefix = "backbone."
			break
		}
	}
	embName := prefix + "embeddings.weight"
	if _, ok := tensors[embName]; !ok {
		if _, ok := tensors[prefix+"embedding.weight"]; ok {
			embName = prefix + "embedding.weight"
		}
	}
	d, E, N, R, K, V := cfg.Hidden, cfg.Inner, cfg.State, cfg.DTRank, cfg.ConvKernel, cfg.Vocab
	specs := []spec{
		{name: embName, shape: []int{V, d}, dst: &w.Embeddings, dst16: &n16.Embeddings},
		{name: prefix + "norm_f.weight", shape: []int{d}, dst: &w.NormF},
		{name: "lm_head.weight", shape: []int{V, d}, dst: &w.LMHead, dst16: &n16.LMHead, optional: true},
	}
	if t, ok := tensors["input_proj.weight"]; ok {
		if len(t.shape) == 2 {
			w.Config.InputDim = t.shape[1]
		}
		specs = append(specs,
			spec{name: "input_proj.weight", shape: []int{d, w.Config.InputDim}, dst: &w.InputProj, dst16: &n16.InputProj},
			spec{name: "input_proj.bias", shape: []int{d}, dst: &w.InputBias, optional: true})
	}
	w.Layers = make([]Layer, cfg.Layers)
	aLog := make([][]float32, cfg.Layers)
	for i := range w.Layers {
		l, l16, p := &w.Layers[i], &n16.Layers[i], fmt.Sprintf("%slayers.%d.", prefix, i)
		specs = append(specs,
			spec{name: p + "norm.weight", shape: []int{d}, dst: &l.Norm},
			spec{name: p + "mixer.in_proj.weight", shape: []int{2 * E, d}, dst: &l.InProj, dst16: &l16.InProj},
			spec{name: p + "mixer.conv1d.weight", shape: []int{E, 1, K}, dst: &l.Conv},
			spec{name: p + "mixer.x_proj.weight", shape: []int{R + 2*N, E}, dst: &l.XProj, dst16: &l16.XProj},
			spec{name: p + "mixer.dt_proj.weight", shape: []int{E, R}, dst: &l.DTProj, dst16: &l16.DTProj},
			spec{name: p + "mixer.dt_proj.bias", shape: []int{E}, dst: &l.DTBias},
			spec{name: p + "mixer.A_log", shape: []int{E, N}, dst: &aLog[i]},
			spec{name: p + "mixer.D", shape: []int{E}, dst: &l.D},
			spec{name: p + "mixer.out_proj.weight", shape: []int{d, E}, dst: &l.OutProj, dst16: &l16.OutProj},
		)
		if cfg.UseBias {
			specs = append(specs,
				spec{name: p + "mixer.in_proj.bias", shape: []int{2 * E}, dst: &l.InBias},
				spec{name: p + "mixer.out_proj.bias", shape: []int{d}, dst: &l.OutBias})
		}
		if cfg.UseConvBias {
			specs = append(specs, spec{name: p + "mixer.conv1d.bias", shape: []int{E}, dst: &l.ConvBias})
		}
	}

	slab := newLoadSlab(specs, tensors, narrow)
	known := map[string]bool{}
	for _, s := range specs {
		known[s.name] = true
		t, ok := tensors[s.name]
		if !ok {
			if !s.optional {
				problems = append(problems, fmt.Sprintf("missing %s %v", s.name, s.shape))
			}
			continue
		}
		if !slices.Equal(t.shape, s.shape) {
			problems = append(problems, fmt.Sprintf("%s has shape %v, want %v (in %s)", s.name, t.shape, s.shape, t.in))
			continue
		}
		var err error
		i, inSlab := slab.has(s.name)
		switch {
		case inSlab && narrow != "":
			*s.dst16 = slab.bits(i)
			err = t.read16Into(narrow, *s.dst16)
		case inSlab:
			*s.dst = slab.floats(i)
			err = t.readInto(*s.dst)
		default:
			*s.dst, err = t.read()
		}
		if t.release != nil {
			t.release() // read: the copy is the load's only memory of it now
		}
		if err != nil {
			problems = append(problems, err.Error())
		}
	}
	var extra []string
	for n := range tensors {
		if !known[n] {
			extra = append(extra, n)
		}
	}
	sort.Strings(extra)
	for _, n := range extra {
		problems = append(problems, fmt.Sprintf("unexpected tensor %s (in %s)", n, tensors[n].in))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s does not match its config (d=%d, layers=%d, d_inner=%d, d_state=%d, dt_rank=%d, conv=%d, vocab=%d): %s",
			what, d, cfg.Layers, E, N, R, K, V, strings.Join(problems, "; "))
	}
	for i := range w.Layers {
		a := make([]float32, len(aLog[i]))
		for j, v := range aLog[i] {
			a[j] = -float32(math.Exp(float64(v)))
		}
		w.Layers[i].A = a
	}
	if narrow != "" {
		if n16.LMHead == nil {
			n16.LMHead = n16.Embeddings
		}
		w.Narrowed = n16
		return w, nil
	}
	if w.LMHead == nil {
		w.LMHead = w.Embeddings
	}
	return w, nil
}

// openFiles maps the checkpoint's safetensors files: the shards named by
// model.safetensors.index.json, or model.safetensors alone.
func openFiles(dir string) ([]*safetensors.File, error) {
	index := filepath.Join(dir, "model.safetensors.index.json")
	var paths []string
	if data, err := os.ReadFile(index); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(data, &idx); err != nil {
			return nil, fmt.Errorf("%s: %w", index, err)
		}
		seen := map[string]bool{}
		for _, f := range idx.WeightMap {
			if !seen[f] {
				seen[f] = true
				paths = append(paths, filepath.Join(dir, f))
			}
		}
		sort.Strings(paths)
		if len(paths) == 0 {
			return nil, fmt.Errorf("%s: empty weight_map", index)
		}
	} else if errors.Is(err, os.ErrNotExist) {
		paths = []string{filepath.Join(dir, "model.safetensors")}
	} else {
		return nil, err
	}
	var files []*safetensors.File
	for _, p := range paths {
		f, err := safetensors.Open(p)
		if err != nil {
			for _, g := range files {
				g.Close()
			}
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}
