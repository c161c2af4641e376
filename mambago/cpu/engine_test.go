package cpu_test

import (
	"testing"

	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cpu"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/enginetest"
)

func open(t *testing.T, dir string) engine.Engine {
	t.Helper()
	w, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cpu.New(w)
}

func TestConformance(t *testing.T) { enginetest.Run(t, open) }

// TestSmallChunks reruns the suite with chunks of a few rows, so the chunking
// along T is exercised on every case.
func TestSmallChunks(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, dir string) engine.Engine {
		e := open(t, dir).(*cpu.Engine)
		e.ChunkRows = 5
		return e
	})
}
