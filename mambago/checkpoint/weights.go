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
}

// spec is one tensor the loader expects: its name, shape, where it goes, and
// whether its absence is an error.
type spec struct {
	name     string
	shape    []int
	dst      *[]float32
	optional bool
}

// Load reads the model in dir: config.json plus model.safetensors, or the
// shards listed in model.safetensors.index.json. Every tensor is converted to
// float32 straight from the memory-mapped files. A bad checkpoint gives one
// error that names the files and every missing, extra or mis-shaped tensor.
func Load(dir string) (*Weights, error) {
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
	where := map[string]*safetensors.File{}
	var problems []string
	for _, f := range files {
		for _, n := range f.Names() {
			if g, dup := where[n]; dup {
				problems = append(problems, fmt.Sprintf("%s is in both %s and %s", n, filepath.Base(g.Path), filepath.Base(f.Path)))
			}
			where[n] = f
		}
	}

	w := &Weights{Config: cfg}
	// MambaForCausalLM and state-spaces checkpoints prefix the body with
	// "backbone."; a MambaModel saved on its own does not.
	prefix := ""
	for n := range where {
		if strings.HasPrefix(n, "backbone.") {
			prefix = "backbone."
			break
		}
	}
	embName := prefix + "embeddings.weight"
	if _, ok := where[embName]; !ok {
		if _, ok := where[prefix+"embedding.weight"]; ok {
			embName = prefix + "embedding.weight"
		}
	}
	d, E, N, R, K, V := cfg.Hidden, cfg.Inner, cfg.State, cfg.DTRank, cfg.ConvKernel, cfg.Vocab
	specs := []spec{
		{name: embName, shape: []int{V, d}, dst: &w.Embeddings},
		{name: prefix + "norm_f.weight", shape: []int{d}, dst: &w.NormF},
		{name: "lm_head.weight", shape: []int{V, d}, dst: &w.LMHead, optional: true},
	}
	if t, ok := where["input_proj.weight"]; ok {
		if info, _ := t.Info("input_proj.weight"); len(info.Shape) == 2 {
			w.Config.InputDim = info.Shape[1]
		}
		specs = append(specs,
			spec{name: "input_proj.weight", shape: []int{d, w.Config.InputDim}, dst: &w.InputProj},
			spec{name: "input_proj.bias", shape: []int{d}, dst: &w.InputBias, optional: true})
	}
	w.Layers = make([]Layer, cfg.Layers)
	aLog := make([][]float32, cfg.Layers)
	for i := range w.Layers {
		l, p := &w.Layers[i], fmt.Sprintf("%slayers.%d.", prefix, i)
		specs = append(specs,
			spec{name: p + "norm.weight", shape: []int{d}, dst: &l.Norm},
			spec{name: p + "mixer.in_proj.weight", shape: []int{2 * E, d}, dst: &l.InProj},
			spec{name: p + "mixer.conv1d.weight", shape: []int{E, 1, K}, dst: &l.Conv},
			spec{name: p + "mixer.x_proj.weight", shape: []int{R + 2*N, E}, dst: &l.XProj},
			spec{name: p + "mixer.dt_proj.weight", shape: []int{E, R}, dst: &l.DTProj},
			spec{name: p + "mixer.dt_proj.bias", shape: []int{E}, dst: &l.DTBias},
			spec{name: p + "mixer.A_log", shape: []int{E, N}, dst: &aLog[i]},
			spec{name: p + "mixer.D", shape: []int{E}, dst: &l.D},
			spec{name: p + "mixer.out_proj.weight", shape: []int{d, E}, dst: &l.OutProj},
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

	known := map[string]bool{}
	for _, s := range specs {
		known[s.name] = true
		f, ok := where[s.name]
		if !ok {
			if !s.optional {
				problems = append(problems, fmt.Sprintf("missing %s %v", s.name, s.shape))
			}
			continue
		}
		info, _ := f.Info(s.name)
		if !slices.Equal(info.Shape, s.shape) {
			problems = append(problems, fmt.Sprintf("%s has shape %v, want %v (in %s)", s.name, info.Shape, s.shape, filepath.Base(f.Path)))
			continue
		}
		v, err := f.Float32(s.name)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		*s.dst = v
	}
	var extra []string
	for n := range where {
		if !known[n] {
			extra = append(extra, n)
		}
	}
	sort.Strings(extra)
	for _, n := range extra {
		problems = append(problems, fmt.Sprintf("unexpected tensor %s (in %s)", n, filepath.Base(where[n].Path)))
	}
	if len(problems) > 0 {
		names := make([]string, len(files))
		for i, f := range files {
			names[i] = f.Path
		}
		return nil, fmt.Errorf("checkpoint %s does not match its config (d=%d, layers=%d, d_inner=%d, d_state=%d, dt_rank=%d, conv=%d, vocab=%d): %s",
			strings.Join(names, ", "), d, cfg.Layers, E, N, R, K, V, strings.Join(problems, "; "))
	}
	for i := range w.Layers {
		a := aLog[i]
		for j, v := range a {
			a[j] = -float32(math.Exp(float64(v)))
		}
		w.Layers[i].A = a
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
