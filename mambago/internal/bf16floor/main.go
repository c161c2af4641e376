// Command bf16floor measures how far bf16 weights alone move the logits of
// the HF fixture models, with the f32 CPU engine: the floor under any engine
// that stores the GEMM weights in bf16.
//
//	go run ./mambago/internal/bf16floor
//
// For each fixture case it rounds in_proj, x_proj and out_proj (and, in a
// second column, the embeddings and lm_head too) to bf16, runs the prompt,
// and prints the mean over positions of KL(HF reference ‖ these logits).
package main

import (
	"fmt"
	"log"
	"math"

	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cpu"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
	"github.com/mambago/mambago/mambago/safetensors"
)

func main() {
	cases, err := fixture.All()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%-12s %14s %14s\n", "case", "GEMM weights", "+ embeddings")
	worst := [2]float64{}
	for _, c := range cases {
		var kl [2]float64
		for i, head := range []bool{false, true} {
			w, err := checkpoint.Load(c.Dir)
			if err != nil {
				log.Fatal(err)
			}
			roundWeights(w, head)
			if kl[i], err = meanKL(w, c); err != nil {
				log.Fatal(err)
			}
			worst[i] = math.Max(worst[i], kl[i])
		}
		fmt.Printf("%-12s %14.2e %14.2e\n", c.Name, kl[0], kl[1])
	}
	fmt.Printf("%-12s %14.2e %14.2e\n", "worst", worst[0], worst[1])
}

// roundWeights rounds the layers' GEMM weights to bf16, and the embeddings
// and lm_head too when head is set.
func roundWeights(w *checkpoint.Weights, head bool) {
	for l := range w.Layers {
		for _, v := range [][]float32{w.Layers[l].InProj, w.Layers[l].XProj, w.Layers[l].OutProj} {
			roundBF16(v)
		}
	}
	if head {
		roundBF16(w.Embeddings)
		if &w.LMHead[0] != &w.Embeddings[0] {
			roundBF16(w.LMHead)
		}
	}
}

func roundBF16(v []float32) {
	for i, x := range v {
		v[i] = math.Float32frombits(uint32(safetensors.BF16Bits(x)) << 16)
	}
}

// meanKL runs the case's prompt on w and returns the mean over positions of
// KL(reference ‖ logits).
func meanKL(w *checkpoint.Weights, c *fixture.Case) (float64, error) {
	e := cpu.New(w)
	st, err := e.NewState(c.B)
	if err != nil {
		return 0, err
	}
	V, rows := w.Config.Vocab, c.B*c.T
	hidden := make([]float32, rows*w.Config.Hidden)
	if err := e.Prefill(st, c.Input, engine.All, hidden); err != nil {
		return 0, err
	}
	logits := make([]float32, rows*V)
	if err := e.Logits(hidden, rows, logits); err != nil {
		return 0, err
	}
	kl, _ := fixture.LogitStats(c.Logits, logits, V)
	return kl, nil
}
