package cpu

import "math"

// exp32 returns e^x in float32 with an error under 2 ulp over the range the
// scan uses (x ≤ 0): range reduction x = k·ln2 + r, |r| ≤ ln2/2, then a degree-6
// polynomial for e^r and an exponent shift. Results below float32's normal
// range (x < -87.34) flush to 0.
func exp32(x float32) float32 {
	if x < -87.33654 {
		return 0
	}
	if x > 88.72283 {
		return float32(math.Inf(1))
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	k := float32(math.Floor(float64(x*log2e + 0.5)))
	r := x - k*ln2hi - k*ln2lo
	p := float32(1.0 / 720)
	p = p*r + 1.0/120
	p = p*r + 1.0/24
	p = p*r + 1.0/6
	p = p*r + 0.5
	p = p*r + 1
	p = p*r + 1
	return p * math.Float32frombits(uint32(int32(k)+127)<<23)
}

// softplus is log(1 + e^x) with PyTorch's threshold: x above 20 is returned as is.
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}

// silu is x·sigmoid(x).
func silu(x float32) float32 {
	return x / (1 + float32(math.Exp(float64(-x))))
}

// rmsScale returns 1/sqrt(mean(v²) + eps), accumulated in float64.
func rmsScale(v []float32, eps float64) float32 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	return float32(1 / math.Sqrt(ss/float64(len(v))+eps))
}
