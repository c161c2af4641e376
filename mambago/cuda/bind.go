package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"unsafe"
)

// ErrUnbindable says a graph's buffer cannot be rebound: the driver lacks
// the entry points (CUDA < 12.4), or a node uses the buffer in a way a
// rebinding could not follow. Replays then copy through the buffer.
var ErrUnbindable = errors.New("cuda: buffer cannot be rebound")

// Binding is one device buffer of a captured graph that replays may move
// elsewhere: every use of it by the graph's own kernels (an argument that
// points into it) and by its memset nodes, found once by Graph.Bind, so
// that Rebind can point them all at another buffer of the same size. A
// replay can then read its input from, or write its output to, the
// caller's memory in place instead of copying through the buffer.
type Binding struct {
	g           *Graph
	base, at    Ptr // the captured buffer, and where the uses point now (0: unknown)
	kernels     []kernelUse
	memsets     []memsetUse
	kernelNodes int // kernel nodes whose arguments Bind read, for tests
}

// kernelUse is a kernel node with arguments that point into the buffer,
// and the pointers to move.
type kernelUse struct {
	node    unsafe.Pointer
	patches []patch
}

// nodeArgs is a kernel node's argument block as the executable graph has
// it now, and each argument's offset in it. A graph keeps one a node for
// all its bindings, so that rebinding one buffer keeps what another's
// Rebind wrote into the same node.
type nodeArgs struct {
	args    []byte
	offsets []int32
}

// patch is an 8-byte argument at off in the argument block that points
// delta bytes into the buffer.
type patch struct {
	off   int
	delta uint64
}

// memsetUse is a memset node that writes delta bytes into the buffer.
type memsetUse struct {
	node  unsafe.Pointer
	delta uint64
}

// maxArgBytes is the largest kernel parameter block (CUDA 12.1 and later).
const maxArgBytes = 32764

// maxArgs is the most arguments a kernel node may take for Bind and
// MemsetEdit to read them; ours take at most about 40.
const maxArgs = 64

// readKernelArgs reads kernel node's first n arguments (up to maxArgs) into
// args, scratch room of maxArgBytes, and returns each one's offset and size
// there.
func readKernelArgs(node unsafe.Pointer, n int, args []byte) (offsets, sizes []int32, err error) {
	if n < 0 || n > maxArgs {
		return nil, nil, fmt.Errorf("takes %d arguments (at most %d can be read)", n, maxArgs)
	}
	offsets, sizes = make([]int32, n), make([]int32, n)
	if n == 0 {
		return offsets, sizes, nil
	}
	err = check("cuFuncGetParamInfo", C.mg_cuGraphKernelNodeArgs(node, C.int(n), (*C.uchar)(unsafe.Pointer(&args[0])),
		C.size_t(len(args)), (*C.int)(unsafe.Pointer(&offsets[0])), (*C.int)(unsafe.Pointer(&sizes[0]))))
	return offsets, sizes, err
}

// CUgraphNodeType values Bind knows beyond kernels and memsets: copies,
// which it checks, and nodes that touch no memory of the caller's.
const (
	copyNode        = 1
	emptyNode       = 5
	waitEventNode   = 6
	recordEventNode = 7
	memAllocNode    = 10
	memFreeNode     = 11
)

// Bind finds the uses of the buffer [base, base+bytes) in g.
//
// A kernel of ours moves with the buffer argument by argument: each 8-byte
// argument that points into the buffer is rewritten on Rebind. A memset
// node that writes inside it moves too. Bind refuses (ErrUnbindable) a
// buffer that anything else may touch, since that would keep using the
// old buffer: a copy node, a memset that writes across its edge or in
// rows (an executable graph moves only 1-D memsets), an argument of ours
// that holds its address inside a larger value (a struct, a tensor map),
// or a node of a kind that may touch memory and that Bind does not know
// (host code, a child graph, stream memory operations). Kernels not of
// ours (a library's) are not read: the caller vouches that they never
// touch the buffer. Nodes that allocate or free the graph's own memory
// touch none of it.
func (g *Graph) Bind(base Ptr, bytes int, ours []*Function) (*Binding, error) {
	if !GraphRebinds() {
		return nil, fmt.Errorf("%w: the driver lacks the entry points (CUDA 12.4 or later)", ErrUnbindable)
	}
	own := map[unsafe.Pointer]*Function{}
	for _, f := range ours {
		own[f.h] = f
	}
	nodes, err := graphNodes(g.graph)
	if err != nil {
		return nil, err
	}
	b := &Binding{g: g, base: base, at: base}
	args := make([]byte, maxArgBytes) // each kernel node's argument block in turn
	inside := func(p uint64, n uint64) bool { return p < uint64(base)+uint64(bytes) && p+n > uint64(base) }
	for _, node := range nodes {
		t, err := nodeType(node)
		if err != nil {
			return nil, err
		}
		switch t {
		case kernelNode:
			if err := b.kernel(node, args, own, inside); err != nil {
				return nil, err
			}
		case memsetNode:
			mp, err := nodeMemset(node)
			if err != nil {
				return nil, err
			}
			if !inside(uint64(mp.dst), mp.bytes()) {
				continue
			}
			if mp.dst < base || uint64(mp.dst)+mp.bytes() > uint64(base)+uint64(bytes) {
				return nil, fmt.Errorf("%w: a memset writes across the buffer's edge", ErrUnbindable)
			}
			if mp.height > 1 { // an executable graph moves only 1-D memsets
				return nil, fmt.Errorf("%w: a 2-D memset writes into the buffer", ErrUnbindable)
			}
			b.memsets = append(b.memsets, memsetUse{node: node, delta: uint64(mp.dst - base)})
		case copyNode:
			var src, dst C.mg_devptr
			var n [2]C.size_t
			if err := check("cuGraphMemcpyNodeGetParams", C.mg_cuGraphMemcpyNodeSpans(node, &src, &dst, &n[0])); err != nil {
				return nil, err
			}
			if src != 0 && inside(uint64(src), uint64(n[0])) || dst != 0 && inside(uint64(dst), uint64(n[1])) {
				return nil, fmt.Errorf("%w: a copy node uses the buffer", ErrUnbindable)
			}
		case emptyNode, waitEventNode, recordEventNode, memAllocNode, memFreeNode:
		default:
			return nil, fmt.Errorf("%w: the graph holds a node of type %d", ErrUnbindable, t)
		}
	}
	return b, nil
}

// kernel records kernel node's uses of the buffer, or refuses them; args
// is scratch room for its argument block. A kernel not of ours is on the
// caller's word: reading its arguments would take their count, which only
// a launch through Function knows (the driver's probe past the last one
// is an API error, which compute-sanitizer reports).
func (b *Binding) kernel(node unsafe.Pointer, args []byte, own map[unsafe.Pointer]*Function, inside func(p, n uint64) bool) error {
	fn, err := kernelFunction(node)
	if err != nil {
		return err
	}
	f := own[fn]
	if fn == nil || f == nil {
		return nil
	}
	n := int(f.nargs.Load())
	offsets, sizes, err := readKernelArgs(node, n, args)
	if err != nil {
		return fmt.Errorf("%w: kernel %s: %v", ErrUnbindable, f.Name, err)
	}
	b.kernelNodes++
	use := kernelUse{node: node}
	end := 0
	for i := range n {
		off, size := int(offsets[i]), int(sizes[i])
		end = max(end, off+size)
		if size == 8 && off%8 == 0 {
			if v := binary.LittleEndian.Uint64(args[off:]); inside(v, 1) {
				use.patches = append(use.patches, patch{off: off, delta: v - uint64(b.base)})
			}
			continue
		}
		// Any other argument: an address of the buffer anywhere in it
		// cannot be followed.
		for w := (off + 7) / 8 * 8; w+8 <= off+size; w += 8 {
			if inside(binary.LittleEndian.Uint64(args[w:]), 1) {
				return fmt.Errorf("%w: argument %d of kernel %s holds its address", ErrUnbindable, i, f.Name)
			}
		}
	}
	if len(use.patches) > 0 {
		if b.g.args == nil {
			b.g.args = map[unsafe.Pointer]*nodeArgs{}
		}
		if b.g.args[node] == nil {
			b.g.args[node] = &nodeArgs{args: slices.Clone(args[:end]), offsets: offsets}
		}
		b.kernels = append(b.kernels, use)
	}
	return nil
}

// nodeMemset reads a memset node's parameters.
func nodeMemset(node unsafe.Pointer) (memsetParams, error) {
	var dst C.mg_devptr
	var pitch, width, height C.size_t
	var value, element C.uint
	err := check("cuGraphMemsetNodeGetParams", C.mg_cuGraphMemsetNodeParams(node, &dst, &pitch, &value, &element,
		&width, &height))
	return memsetParams{dst: Ptr(dst), pitch: uint64(pitch), width: uint64(width), height: uint64(height),
		value: uint32(value), element: int32(element)}, err
}

// Uses is how many kernel nodes and memset nodes use the buffer, and how
// many kernel nodes' arguments Bind read.
func (b *Binding) Uses() (kernels, memsets, read int) {
	return len(b.kernels), len(b.memsets), b.kernelNodes
}

// Rebind points every use of the buffer at to, which must hold as many
// bytes, aligned as the graph's kernels need (the caller checks both);
// the captured buffer's own address points them back. It takes effect at
// the next Launch: launches already queued keep what they had. A no-op
// when the uses point at to already.
func (b *Binding) Rebind(to Ptr) error {
	if to == b.at {
		return nil
	}
	b.at = 0 // unknown until every use has moved
	for _, k := range b.kernels {
		a := b.g.args[k.node]
		for _, p := range k.patches {
			binary.LittleEndian.PutUint64(a.args[p.off:], uint64(to)+p.delta)
		}
		if err := check("cuGraphExecKernelNodeSetParams", C.mg_cuGraphExecKernelNodeSetArgs(b.g.exec, k.node,
			(*C.uchar)(unsafe.Pointer(&a.args[0])), (*C.int)(unsafe.Pointer(&a.offsets[0])), C.int(len(a.offsets)))); err != nil {
			return err
		}
	}
	for _, m := range b.memsets {
		if err := check("cuGraphExecMemsetNodeSetParams", C.mg_cuGraphExecMemsetNodeSetDst(b.g.exec, m.node,
			C.mg_devptr(uint64(to)+m.delta))); err != nil {
			return err
		}
	}
	b.at = to
	return nil
}

// GraphRebinds says whether the loaded driver has the entry points
// Graph.Bind and Binding.Rebind use (CUDA >= 12.4).
func GraphRebinds() bool { return C.mg_graph_rebinds() != 0 }
