package cuda

import "strings"

// DType is the storage type of GEMM operands and of the engine's
// activations: f32, or bf16/f16 with f32 accumulation.
type DType int

// The storage types.
const (
	F32 DType = iota
	BF16
	F16
)

// Size returns the bytes of one element.
func (d DType) Size() int {
	if d == F32 {
		return 4
	}
	return 2
}

// String names the type as numpy and torch do: "float32", "bfloat16", "float16".
func (d DType) String() string {
	return [...]string{"float32", "bfloat16", "float16"}[d]
}

// ParseDType reads a type's name, as numpy, torch or short forms spell it:
// "float32"/"f32"/"fp32", "bfloat16"/"bf16", "float16"/"f16"/"fp16"/"half"
// (any case).
func ParseDType(name string) (DType, bool) {
	switch strings.ToLower(name) {
	case "float32", "f32", "fp32":
		return F32, true
	case "bfloat16", "bf16":
		return BF16, true
	case "float16", "f16", "fp16", "half":
		return F16, true
	}
	return F32, false
}

// Suffix is the kernel-name suffix of the type (kernels.DTypes): "f32", "bf16", "f16".
func (d DType) Suffix() string { return [...]string{"f32", "bf16", "f16"}[d] }

// dataType is the type's cudaDataType_t: CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F.
func (d DType) dataType() int { return [...]int{0, 14, 2}[d] }
