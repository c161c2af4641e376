// Small element-wise stages.
//
//   add_bias_f32:  x[r, i] += bias[i]        x [rows, n] with row stride ld, bias [n]
//   scale_f32:     x[i] *= s                 x [n]
//
// Both take a 1-D grid of any size and stride over the elements.

extern "C" __global__ void add_bias_f32(float *x, int ld, const float *__restrict__ bias, long long rows, int n) {
    long long total = rows * n;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        long long r = i / n;
        int c = (int)(i - r * n);
        x[r * ld + c] += bias[c];
    }
}

extern "C" __global__ void scale_f32(float *x, long long n, float s) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] *= s;
}
