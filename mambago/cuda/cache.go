package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// Cache statistics, for tests and logs.
var cacheHits, cacheMisses atomic.Int64

// CacheStats returns how many CompileCached calls were served from disk and
// how many compiled.
func CacheStats() (hits, misses int64) { return cacheHits.Load(), cacheMisses.Load() }

// CacheDir is where CompileCached keeps CUBINs: $MAMBAGO_KERNEL_CACHE, else
// the user cache directory's mambago/kernels ("" disables the cache).
func CacheDir() string {
	if d, ok := os.LookupEnv("MAMBAGO_KERNEL_CACHE"); ok {
		return d
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(base, "mambago", "kernels")
}

// cachePath is the file CompileCached keeps src's CUBIN for arch and
// options in ("" when there is no cache directory).
func cachePath(src, name, arch string, options []string) (string, error) {
	dir := CacheDir()
	if dir == "" {
		return "", nil
	}
	maj, min, err := NVRTCVersion()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00nvrtc %d.%d\x00%s", src, arch, maj, min, strings.Join(options, "\x00"))
	key := hex.EncodeToString(h.Sum(nil))[:32]
	return filepath.Join(dir, fmt.Sprintf("%s-%s-%s.cubin", strings.TrimSuffix(filepath.Base(name), ".cu"), arch, key)), nil
}

// readCached returns the CUBIN at path, or nil where there is none.
func readCached(path string) []byte {
	if path == "" {
		return nil
	}
	if b, err := os.ReadFile(path); err == nil && bytes.HasPrefix(b, []byte("\x7fELF")) {
		return b
	}
	return nil
}

// IsCached reports whether CompileCached would find src's CUBIN for arch
// and options on disk instead of compiling it.
func IsCached(src, name, arch string, options ...string) bool {
	path, err := cachePath(src, name, arch, options)
	return err == nil && readCached(path) != nil
}

// CompileCached is Compile with an on-disk cache keyed by the source's
// hash, the architecture, NVRTC's version and the options. A cache that
// cannot be read or written is skipped, never an error. It is safe to call
// from several goroutines at once (NVRTC compiles each program on its own).
func CompileCached(src, name, arch string, options ...string) ([]byte, error) {
	path, err := cachePath(src, name, arch, options)
	if err != nil {
		return nil, err
	}
	if b := readCached(path); b != nil {
		cacheHits.Add(1)
		return b, nil
	}
	cubin, err := Compile(src, name, arch, options...)
	if err != nil {
		return nil, err
	}
	cacheMisses.Add(1)
	if dir := filepath.Dir(path); path != "" && os.MkdirAll(dir, 0o755) == nil {
		if tmp, err := os.CreateTemp(dir, ".tmp-*"); err == nil {
			_, werr := tmp.Write(cubin)
			cerr := tmp.Close()
			if werr == nil && cerr == nil {
				os.Rename(tmp.Name(), path) // atomic: readers see the whole file or none
			} else {
				os.Remove(tmp.Name())
			}
		}
	}
	return cubin, nil
}
