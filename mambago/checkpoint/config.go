// Package checkpoint reads Mamba-1 checkpoints trained in PyTorch: the
// config.json and safetensors files that Hugging Face `save_pretrained` writes
// for MambaForCausalLM, MambaModel and FalconMambaForCausalLM, sharded or not,
// and the original state-spaces naming (d_model, n_layer, ssm_cfg,
// backbone.embedding).
package checkpoint

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// MaxStateSize is the largest d_state the engines accept.
const MaxStateSize = 256

// Config holds the dimensions and options of a model.
type Config struct {
	ModelType      string  `json:"model_type"`
	Hidden         int     `json:"hidden_size"`        // d
	Layers         int     `json:"num_hidden_layers"`  // L
	Inner          int     `json:"intermediate_size"`  // E = expand·d
	State          int     `json:"state_size"`         // N
	ConvKernel     int     `json:"conv_kernel"`        // K
	DTRank         int     `json:"time_step_rank"`     // R
	Vocab          int     `json:"vocab_size"`         // V
	UseBias        bool    `json:"use_bias"`           // bias on in_proj and out_proj
	UseConvBias    bool    `json:"use_conv_bias"`      // bias on conv1d
	Eps            float64 `json:"layer_norm_epsilon"` // RMSNorm epsilon of the blocks and norm_f
	MixerEps       float64 `json:"mixer_rms_eps"`      // falcon_mamba: epsilon of the norm on dt, B, C
	Falcon         bool    `json:"falcon"`             // falcon_mamba: weightless RMSNorm on dt, B and C
	TieEmbeddings  bool    `json:"tie_word_embeddings"`
	ResidualInFP32 bool    `json:"residual_in_fp32"`
	InputDim       int     `json:"input_dim"`    // F of input_proj, 0 when the model has none
	EOSTokenID     int     `json:"eos_token_id"` // -1 when the config names none
	// MoreEOSTokenIDs are the end-of-sequence ids a config's list names
	// past its first (EOSTokenID): transformers' generation stops at each.
	MoreEOSTokenIDs []int `json:"more_eos_token_ids"`
	PadTokenID      int   `json:"pad_token_id"` // -1 when the config names none
	// DType is the float type the checkpoint was saved in, as its config
	// names it (transformers' "dtype", earlier "torch_dtype"): "float32",
	// "bfloat16", "float16", or "" where it names none.
	DType string `json:"dtype"`
}

// ParseConfig decodes a config.json in Hugging Face or state-spaces form. It
// refuses a model type other than Mamba-1's (model_type "mamba" or
// "falcon_mamba", or none; ssm_cfg's layer "Mamba1" or none).
func ParseConfig(data []byte) (Config, error) {
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, err
	}
	if ssm, ok := raw["ssm_cfg"].(map[string]any); ok {
		if layer, _ := ssm["layer"].(string); layer != "" && layer != "Mamba1" {
			return Config{}, fmt.Errorf("ssm_cfg.layer %q: mambago runs Mamba-1 models only", layer)
		}
		// Original state-spaces names: lift ssm_cfg into the top level.
		for k, v := range ssm {
			if _, dup := raw[k]; !dup {
				raw[k] = v
			}
		}
	}
	// Each field is read from the first of its names that is present and
	// not null; a value of the wrong type is an error, never a default.
	var bad error
	lookup := func(names ...string) (string, any) {
		for _, n := range names {
			if v, ok := raw[n]; ok && v != nil {
				return n, v
			}
		}
		return "", nil
	}
	num := func(names ...string) (float64, bool) {
		n, v := lookup(names...)
		if v == nil {
			return 0, false
		}
		f, ok := v.(float64)
		if !ok && bad == nil {
			bad = fmt.Errorf("%s = %s, want a number", n, jsonText(v))
		}
		return f, ok
	}
	integer := func(def int, names ...string) int {
		n, v := lookup(names...)
		if v == nil {
			return def
		}
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			if bad == nil {
				bad = fmt.Errorf("%s = %s, want an integer", n, jsonText(v))
			}
			return def
		}
		return int(f)
	}
	boolean := func(def bool, names ...string) bool {
		n, v := lookup(names...)
		if v == nil {
			return def
		}
		b, ok := v.(bool)
		if !ok {
			if bad == nil {
				bad = fmt.Errorf("%s = %s, want true or false", n, jsonText(v))
			}
			return def
		}
		return b
	}
	c := Config{}
	c.ModelType, _ = raw["model_type"].(string)
	switch c.ModelType {
	case "", "mamba", "falcon_mamba": // "": state-spaces configs name none
	default:
		return Config{}, fmt.Errorf("model_type %q: mambago runs Mamba-1 models only (mamba or falcon_mamba)", c.ModelType)
	}
	c.Falcon = c.ModelType == "falcon_mamba"
	c.Hidden = integer(0, "hidden_size", "d_model")
	c.Layers = integer(0, "num_hidden_layers", "n_layer")
	c.State = integer(16, "state_size", "d_state")
	c.ConvKernel = integer(4, "conv_kernel", "d_conv")
	c.Vocab = integer(0, "vocab_size")
	expand := integer(2, "expand")
	c.Inner = integer(expand*c.Hidden, "intermediate_size", "d_inner")
	if _, v := lookup("time_step_rank", "dt_rank"); v != "auto" {
		c.DTRank = integer(0, "time_step_rank", "dt_rank")
	}
	if c.DTRank == 0 { // "auto" or absent
		c.DTRank = int(math.Ceil(float64(c.Hidden) / 16))
	}
	c.UseBias = boolean(false, "use_bias", "bias")
	c.UseConvBias = boolean(true, "use_conv_bias", "conv_bias")
	c.Eps = 1e-5
	if v, ok := num("layer_norm_epsilon", "norm_epsilon"); ok {
		c.Eps = v
	}
	c.MixerEps = 1e-6
	if v, ok := num("mixer_rms_eps"); ok {
		c.MixerEps = v
	}
	c.TieEmbeddings = boolean(true, "tie_word_embeddings", "tie_embeddings")
	c.ResidualInFP32 = boolean(true, "residual_in_fp32")
	if ids, ok := raw["eos_token_id"].([]any); ok { // several end-of-sequence ids: each stops generation
		for _, id := range ids[min(1, len(ids)):] { // each read as the field itself, for its error
			raw["eos_token_id"] = id
			if id := integer(-1, "eos_token_id"); id >= 0 {
				c.MoreEOSTokenIDs = append(c.MoreEOSTokenIDs, id)
			}
		}
		raw["eos_token_id"] = nil
		if len(ids) > 0 {
			raw["eos_token_id"] = ids[0]
		}
	}
	c.EOSTokenID = integer(-1, "eos_token_id")
	c.PadTokenID = integer(-1, "pad_token_id")
	if n, v := lookup("dtype", "torch_dtype"); v != nil {
		name, ok := v.(string)
		if !ok && bad == nil {
			bad = fmt.Errorf("%s = %s, want a type's name", n, jsonText(v))
		}
		c.DType = strings.TrimPrefix(name, "torch.")
	}
	if pad := integer(1, "pad_vocab_size_multiple"); pad > 1 && c.Vocab%pad != 0 {
		// state-spaces pads the embedding table to a multiple.
		c.Vocab += pad - c.Vocab%pad
	}
	if bad != nil {
		return Config{}, bad
	}
	return c, c.Validate()
}

// jsonText shows a decoded JSON value as the file spells it, so that a
// string "64" reads as a string in an error.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// Validate reports the first dimension that is missing or out of range.
func (c Config) Validate() error {
	check := []struct {
		name   string
		v, min int
		max    int
	}{
		{"hidden_size", c.Hidden, 1, 1 << 20},
		{"num_hidden_layers", c.Layers, 1, 1 << 12},
		{"intermediate_size", c.Inner, 1, 1 << 22},
		{"state_size", c.State, 1, MaxStateSize},
		{"conv_kernel", c.ConvKernel, 2, 8},
		{"time_step_rank", c.DTRank, 1, 1 << 20},
		{"vocab_size", c.Vocab, 1, 1 << 26},
	}
	for _, k := range check {
		if k.v < k.min || k.v > k.max {
			return fmt.Errorf("%s = %d, want %d..%d", k.name, k.v, k.min, k.max)
		}
	}
	if !(c.Eps > 0) {
		return fmt.Errorf("layer_norm_epsilon = %g, want > 0", c.Eps)
	}
	return nil
}

// ReadConfig reads dir/config.json.
func ReadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
