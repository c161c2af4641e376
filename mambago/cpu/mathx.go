package cpu

import "math"

// exp2f32 returns 2^x in float32 with an error under 2 ulp: x = k + f with
// k an integer and |f| ≤ 1/2, a degree-6 polynomial for 2^f = e^(f·ln2), and
// k added to the exponent. Results below float32's normal range (x < -126)
// flush to 0. The scan calls it with log2(e) folded into A.
func exp2f32(x float32) float32 {
	if x < -126 {
		return 0
	}
	if x > 127 {
		return float32(math.Inf(1))
	}
	var k float32
	if x < 0 {
		k = float32(int32(x - 0.5))
	} else {
		k = float32(int32(x + 0.5))
	}
	r := (x - k) * math.Ln2
	p := float32(1.0 / 720)
	p = p*r + 1.0/120
	p = p*r + 1.0/24
	p = p*r + 1.0/6
	p = p*r + 0.5
	p = p*r + 1
	p = p*r + 1
	return p * math.Float32frombits(uint32(int32(k)+127)<<23)
}

// exp2neg is exp2f32 for x ≤ 0, small enough to inline into the scan's
// inner loop: below -126 it returns 2^-126 rather than 0, a difference of
// 1e-38 in a decay factor.
func exp2neg(x float32) float32 {
	x = max(x, -126)
	k := float32(int32(x - 0.5)) // round to nearest for x ≤ 0
	r := (x - k) * math.Ln2
	p := (((((1.0/720*r+1.0/120)*r+1.0/24)*r+1.0/6)*r+0.5)*r+1)*r + 1
	return p * math.Float32frombits(uint32(int32(k)+127)<<23)
}

// softplus is log(1 + e^x) with PyTorch's threshold: x above 20 is returned
// as is. It is computed as max(x, 0) + log1p(y), y = e^-|x| ∈ (0, 1], with
// log1p(y) = 2·atanh(s), s = y/(2+y) ≤ 1/3, whose odd series is cut after
// s^11 (truncation under 1.5e-7 relative).
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	y := exp2neg(-abs32(x) * math.Log2E)
	sv := y / (2 + y)
	s2 := sv * sv
	series := 1 + s2*(1.0/3+s2*(1.0/5+s2*(1.0/7+s2*(1.0/9+s2*(1.0/11)))))
	return max(x, 0) + 2*sv*series
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// silu is x·sigmoid(x), through e^-|x| ∈ (0, 1] so that exp2neg (inlined,
// no overflow path) serves both signs.
func silu(x float32) float32 {
	e := exp2neg(-abs32(x) * math.Log2E)
	if x >= 0 {
		return x / (1 + e)
	}
	return x * e / (1 + e)
}

// rmsScale returns 1/sqrt(mean(v²) + eps), accumulated in float64 as four
// sums of every fourth square, added up at the end: four chains of adds in
// flight, where one chain of 768 waited on each add's latency (about 1 µs a
// 130m row).
func rmsScale(v []float32, eps float64) float32 {
	var s0, s1, s2, s3 float64
	n := len(v) &^ 3
	for i := 0; i < n; i += 4 {
		x := v[i : i+4 : i+4]
		s0 += float64(x[0]) * float64(x[0])
		s1 += float64(x[1]) * float64(x[1])
		s2 += float64(x[2]) * float64(x[2])
		s3 += float64(x[3]) * float64(x[3])
	}
	for _, x := range v[n:] {
		s0 += float64(x) * float64(x)
	}
	ss := (s0 + s1) + (s2 + s3)
	return float32(1 / math.Sqrt(ss/float64(len(v))+eps))
}
