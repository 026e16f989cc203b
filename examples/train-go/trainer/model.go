package trainer

import (
	"math"
	"math/rand/v2"
)

// Shape of the synthetic problem. The model is an MLP
// inputDim → hidden (tanh) → numClasses (softmax), trained with
// cross-entropy.
const (
	inputDim    = 16
	numClasses  = 4
	datasetSize = 4096
	labelNoise  = 1.0 // std of the noise added to the teacher's logits
)

// dataset is a fixed synthetic classification set: Gaussian inputs
// labelled by a random linear teacher plus noise, so the loss cannot reach
// zero and keeps moving for the whole run.
type dataset struct {
	x []float64 // datasetSize × inputDim, row-major
	y []int     // datasetSize labels in [0, numClasses)
}

func newDataset(seed uint64) dataset {
	rng := rand.New(rand.NewPCG(seed, 0x6461746173657400)) // "dataset"
	teacher := make([]float64, numClasses*inputDim)
	for i := range teacher {
		teacher[i] = rng.NormFloat64()
	}
	d := dataset{x: make([]float64, datasetSize*inputDim), y: make([]int, datasetSize)}
	for n := range datasetSize {
		row := d.x[n*inputDim : (n+1)*inputDim]
		for i := range row {
			row[i] = rng.NormFloat64()
		}
		best, bestV := 0, math.Inf(-1)
		for k := range numClasses {
			v := labelNoise * rng.NormFloat64()
			for i, xi := range row {
				v += teacher[k*inputDim+i] * xi
			}
			if v > bestV {
				best, bestV = k, v
			}
		}
		d.y[n] = best
	}
	return d
}

// batchOrder maps a global example position (step-1)*batch+j to a data set
// index: each pass over the data set uses a fresh permutation drawn from
// the seed and the epoch number, so the batch of a step depends only on the
// seed, the batch size and the step.
type batchOrder struct {
	seed  uint64
	epoch int64
	perm  []int
}

func (o *batchOrder) index(pos int64) int {
	e := pos / datasetSize
	if o.perm == nil || e != o.epoch {
		rng := rand.New(rand.NewPCG(o.seed, 0x65706f6368000000+uint64(e))) // "epoch"
		o.perm, o.epoch = rng.Perm(datasetSize), e
	}
	return o.perm[pos%datasetSize]
}

// shard is the half-open range [lo, hi) of positions in a global batch that
// a rank computes. Shard sizes differ by at most one.
func shard(batch, rank, world int) (lo, hi int) {
	return batch * rank / world, batch * (rank + 1) / world
}

// mlp holds the layout of the flat parameter vector:
// W1 (hidden×inputDim), b1 (hidden), W2 (numClasses×hidden), b2 (numClasses).
type mlp struct{ hidden int }

func (m mlp) numParams() int {
	return m.hidden*inputDim + m.hidden + numClasses*m.hidden + numClasses
}

func (m mlp) split(p []float64) (w1, b1, w2, b2 []float64) {
	h := m.hidden
	w1, p = p[:h*inputDim], p[h*inputDim:]
	b1, p = p[:h], p[h:]
	w2, p = p[:numClasses*h], p[numClasses*h:]
	return w1, b1, w2, p[:numClasses]
}

// init returns Glorot-uniform weights and zero biases drawn from seed.
func (m mlp) init(seed uint64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 0x696e697400000000)) // "init"
	p := make([]float64, m.numParams())
	w1, _, w2, _ := m.split(p)
	a := math.Sqrt(6.0 / float64(inputDim+m.hidden))
	for i := range w1 {
		w1[i] = a * (2*rng.Float64() - 1)
	}
	b := math.Sqrt(6.0 / float64(m.hidden+numClasses))
	for i := range w2 {
		w2[i] = b * (2*rng.Float64() - 1)
	}
	return p
}

// gradScratch is per-example working memory for accumulateGrad.
type gradScratch struct{ h, dh, z []float64 }

func (m mlp) scratch() *gradScratch {
	return &gradScratch{h: make([]float64, m.hidden), dh: make([]float64, m.hidden), z: make([]float64, numClasses)}
}

// accumulateGrad adds scale × the gradient of the cross-entropy of example
// (x, y) to grad (laid out like params) and returns scale × its loss.
func (m mlp) accumulateGrad(params, grad []float64, x []float64, y int, scale float64, s *gradScratch) float64 {
	w1, b1, w2, b2 := m.split(params)
	gw1, gb1, gw2, gb2 := m.split(grad)
	h := s.h
	for j := range h {
		v := b1[j]
		row := w1[j*inputDim : (j+1)*inputDim]
		for i, xi := range x {
			v += row[i] * xi
		}
		h[j] = math.Tanh(v)
	}
	z := s.z
	zmax := math.Inf(-1)
	for k := range z {
		v := b2[k]
		row := w2[k*m.hidden : (k+1)*m.hidden]
		for j, hj := range h {
			v += row[j] * hj
		}
		z[k] = v
		zmax = max(zmax, v)
	}
	var sum float64
	for k := range z {
		z[k] = math.Exp(z[k] - zmax)
		sum += z[k]
	}
	loss := -math.Log(z[y] / sum)
	// z becomes dLoss/dlogits = softmax - onehot, scaled.
	for k := range z {
		z[k] /= sum
		if k == y {
			z[k]--
		}
		z[k] *= scale
	}
	dh := s.dh
	clear(dh)
	for k, dz := range z {
		gb2[k] += dz
		row := w2[k*m.hidden : (k+1)*m.hidden]
		grow := gw2[k*m.hidden : (k+1)*m.hidden]
		for j, hj := range h {
			grow[j] += dz * hj
			dh[j] += dz * row[j]
		}
	}
	for j, hj := range h {
		da := dh[j] * (1 - hj*hj)
		gb1[j] += da
		grow := gw1[j*inputDim : (j+1)*inputDim]
		for i, xi := range x {
			grow[i] += da * xi
		}
	}
	return scale * loss
}

// localGrad fills buf[:numParams] with this rank's share of the mean
// gradient of step's global batch and buf[numParams] with its share of the
// mean loss. Summing buf over all ranks gives the full-batch means.
func (m mlp) localGrad(params, buf []float64, d dataset, order *batchOrder, step, batch, rank, world int, s *gradScratch) {
	clear(buf)
	n := m.numParams()
	grad := buf[:n]
	scale := 1 / float64(batch)
	lo, hi := shard(batch, rank, world)
	var loss float64
	for j := lo; j < hi; j++ {
		idx := order.index(int64(step-1)*int64(batch) + int64(j))
		loss += m.accumulateGrad(params, grad, d.x[idx*inputDim:(idx+1)*inputDim], d.y[idx], scale, s)
	}
	buf[n] = loss
}

// sgdMomentum applies v ← μv + g; p ← p − lr·v.
func sgdMomentum(params, velocity, grad []float64, lr, mu float64) {
	for i, g := range grad {
		velocity[i] = mu*velocity[i] + g
		params[i] -= lr * velocity[i]
	}
}
