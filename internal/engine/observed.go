/*
Copyright 2026 The Cachet Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package engine

// Observed workload profiles (issue 23): the operator reads each pod's size
// histogram and miss-ratio curve from its /metrics (no Prometheus in
// between), merges them across pods, and recommends classes and memory from
// what the pods hold. Everything here is pure: parse a scrape, merge, derive,
// decide whether to apply. The controller only fetches and writes status.
//
// Merging. Each pod is a shard with spec.memory of its own and its own keys.
// Histograms add bucket by bucket. Curves combine as the fleet's misses over
// its GETs: at a per-pod size M the fleet misses Σ refs_i · mr_i(M) of
// Σ refs_i GETs, so the merged curve is the reference-weighted mean of the
// pods' curves at each size (a pod's curve between its points is linear,
// beyond its ends its nearest point).

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/api/resource"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// The metric families an Observed profile reads (engine/src/metrics.c).
const (
	MetricItemSizes     = "cachet_item_sizes"
	MetricMissRatio     = "cachet_miss_ratio"
	MetricMRCReferences = "cachet_mrc_references_total"
)

const (
	// MinObservedItems: fewer stored items than this (all pods together)
	// say too little about the sizes to recommend classes from them.
	MinObservedItems = 500
	// MinCurveReferences: a curve from fewer GETs than this (all pods
	// together) predicts no hit ratio.
	MinCurveReferences = 1000
	// KneeHitRatio: without targetHitRatio, the recommended memory is the
	// least whose predicted hit ratio is within this of the curve's best
	// (more memory buys less than a point of hits).
	KneeHitRatio = 0.01
	// StickWastePoints: a new observation keeps the recommended classes
	// while they waste at most this many percentage points of chunk bytes
	// more than the best classes for it, so sampling noise does not
	// restart the count of stable observations.
	StickWastePoints = 1.0
	// MinApplyGainPoints: apply Auto rolls the pods (each restarted pod
	// starts empty) only for at least this many percentage points less
	// waste than the classes the pods run.
	MinApplyGainPoints = 5.0
	// StableObservationsToApply: apply Auto rolls only after this many
	// observations in a row kept the same recommended classes.
	StableObservationsToApply = 3
)

// CurvePoint is one point of a miss-ratio curve: the miss ratio of an LRU
// cache holding CacheBytes of items.
type CurvePoint struct {
	CacheBytes int64
	MissRatio  float64
}

// PodSample is what one pod's /metrics says about its workload.
type PodSample struct {
	Name string
	// Sizes: items stored now, by the upper bound of their size bucket
	// (whole items: header, key and value), not cumulative. Items in the
	// +Inf bucket (over the largest bound) are left out: they are chained.
	Sizes []SizeShare
	// Curve ascending by CacheBytes.
	Curve []CurvePoint
	// References: the GETs the curve was computed from.
	References float64
}

// ParsePodMetrics reads a pod's size histogram and miss-ratio curve from its
// /metrics text (Prometheus text format).
func ParsePodMetrics(name string, r io.Reader) (PodSample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return PodSample{}, fmt.Errorf("pod %s: metrics: %w", name, err)
	}
	s := PodSample{Name: name}
	if f := fams[MetricMRCReferences]; f != nil && len(f.Metric) > 0 {
		s.References = sampleValue(f.Metric[0])
	}
	type cum struct {
		le    int64
		count float64
	}
	var hist []cum
	if f := fams[MetricItemSizes]; f != nil {
		for _, m := range f.Metric {
			le := labelValue(m.GetLabel(), "max_bytes")
			if le == "+Inf" {
				continue
			}
			b, err := strconv.ParseInt(le, 10, 64)
			if err != nil || b <= 0 {
				return PodSample{}, fmt.Errorf("pod %s: %s: bad max_bytes %q", name, MetricItemSizes, le)
			}
			hist = append(hist, cum{b, sampleValue(m)})
		}
	}
	sort.Slice(hist, func(i, j int) bool { return hist[i].le < hist[j].le })
	prev := 0.0
	for _, h := range hist {
		if n := h.count - prev; n > 0 {
			s.Sizes = append(s.Sizes, SizeShare{Bytes: h.le, Weight: n})
		}
		prev = max(prev, h.count)
	}
	if f := fams[MetricMissRatio]; f != nil {
		for _, m := range f.Metric {
			v := labelValue(m.GetLabel(), "cache_bytes")
			b, err := strconv.ParseInt(v, 10, 64)
			mr := sampleValue(m)
			if err != nil || b <= 0 || math.IsNaN(mr) || mr < 0 || mr > 1 {
				return PodSample{}, fmt.Errorf("pod %s: %s: bad point cache_bytes=%q value %v", name, MetricMissRatio, v, mr)
			}
			s.Curve = append(s.Curve, CurvePoint{b, mr})
		}
	}
	sort.Slice(s.Curve, func(i, j int) bool { return s.Curve[i].CacheBytes < s.Curve[j].CacheBytes })
	return s, nil
}

// sampleValue is a sample's value whatever its family's TYPE line said (or
// without one).
func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	return m.GetUntyped().GetValue()
}

func labelValue[L interface {
	GetName() string
	GetValue() string
}](labels []L, name string) string {
	for _, l := range labels {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// MissRatioAt is the curve at bytes: linear between points, its nearest
// point beyond its ends; 1 (all misses) without points.
func MissRatioAt(curve []CurvePoint, bytes float64) float64 {
	if len(curve) == 0 {
		return 1
	}
	if bytes <= float64(curve[0].CacheBytes) {
		return curve[0].MissRatio
	}
	for i := 1; i < len(curve); i++ {
		a, b := curve[i-1], curve[i]
		if bytes <= float64(b.CacheBytes) {
			f := (bytes - float64(a.CacheBytes)) / float64(b.CacheBytes-a.CacheBytes)
			return a.MissRatio + f*(b.MissRatio-a.MissRatio)
		}
	}
	return curve[len(curve)-1].MissRatio
}

// MergeSizes adds the pods' histograms bucket by bucket.
func MergeSizes(pods []PodSample) []SizeShare {
	by := map[int64]float64{}
	for _, p := range pods {
		for _, s := range p.Sizes {
			by[s.Bytes] += s.Weight
		}
	}
	out := make([]SizeShare, 0, len(by))
	for b, w := range by {
		out = append(out, SizeShare{b, w})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bytes < out[j].Bytes })
	return out
}

// MergeCurves is the reference-weighted mean of the pods' curves at every
// size any pod's curve has (see the file comment); nil when no pod saw a
// GET.
func MergeCurves(pods []PodSample) ([]CurvePoint, float64) {
	var grid []int64
	var refs float64
	for _, p := range pods {
		if p.References <= 0 || len(p.Curve) == 0 {
			continue
		}
		refs += p.References
		for _, c := range p.Curve {
			grid = append(grid, c.CacheBytes)
		}
	}
	if refs == 0 {
		return nil, 0
	}
	slices.Sort(grid)
	grid = slices.Compact(grid)
	out := make([]CurvePoint, len(grid))
	for i, b := range grid {
		var misses float64
		for _, p := range pods {
			if p.References > 0 && len(p.Curve) > 0 {
				misses += p.References * MissRatioAt(p.Curve, float64(b))
			}
		}
		out[i] = CurvePoint{b, misses / refs}
	}
	return out, refs
}

// Observation is what one read of the pods recommends.
type Observation struct {
	// Classes are the best classes for the merged histogram (without the
	// engine's own slab_chunk_max class).
	Classes []int64
	// Items the read pods hold, all together.
	Items float64
	// Sizes is the merged histogram of the items that fit a slab chunk.
	Sizes []SizeShare
	// Curve merged, and the GETs behind it.
	Curve      []CurvePoint
	References float64
	Notes      []string
}

// Observe merges the pods' samples and picks the best classes for them at
// memBytes, each pod's item memory (spec.memory): the least-waste classes
// for the count the page model says keeps the most items per pod
// (ClassesForMemory), the items a pod holds now counted as what it must
// keep. Items over the engine's slab_chunk_max are chained and get no
// class.
func Observe(pods []PodSample, memBytes int64) Observation {
	chunkMax := cachev1alpha1.SlabChunkMax(memBytes)
	o := Observation{}
	for _, s := range MergeSizes(pods) {
		o.Items += s.Weight
		if s.Bytes <= chunkMax {
			s.Bytes = max(s.Bytes, MinClassBytes)
			o.Sizes = append(o.Sizes, s)
		}
	}
	o.Sizes = mergeEqual(o.Sizes)
	if o.Items >= MinObservedItems {
		reporting := 0
		for _, p := range pods {
			if len(p.Sizes) > 0 {
				reporting++
			}
		}
		perPod := weightOf(o.Sizes) / float64(max(reporting, 1))
		o.Classes = ClassesForMemory(o.Sizes, MaxProfileClasses, perPod, memBytes)
	} else {
		o.Notes = append(o.Notes, fmt.Sprintf("the pods hold %.0f items, too few to derive classes from (at least %d)", o.Items, MinObservedItems))
	}
	o.Curve, o.References = MergeCurves(pods)
	if o.References < MinCurveReferences {
		o.Curve = nil
		o.Notes = append(o.Notes, fmt.Sprintf("the miss-ratio curve has seen %.0f GETs, too few to predict hit ratios from (at least %d)", o.References, MinCurveReferences))
	}
	return o
}

// mergeEqual adds the weights of equal sizes (ascending input).
func mergeEqual(in []SizeShare) []SizeShare {
	var out []SizeShare
	for _, s := range in {
		if n := len(out); n > 0 && out[n-1].Bytes == s.Bytes {
			out[n-1].Weight += s.Weight
			continue
		}
		out = append(out, s)
	}
	return out
}

// withChunkMax is classes with the engine's own largest class appended.
func withChunkMax(classes []int64, chunkMax int64) []int64 {
	out := append(slices.Clone(classes), chunkMax)
	slices.Sort(out)
	return slices.Compact(out)
}

// HitRatioAt is the hit ratio a curve predicts for memBytes of item memory
// whose chunks leave waste (a share) unused: the curve counts item bytes,
// and chunk rounding keeps the rest from items.
func HitRatioAt(curve []CurvePoint, memBytes int64, waste float64) float64 {
	return 1 - MissRatioAt(curve, float64(memBytes)*(1-waste))
}

// MemoryForCurve is the item memory the recommendation names from a curve:
// the least that reaches target (a hit ratio; <= 0: the curve's knee, see
// KneeHitRatio) in classes that waste waste, one slab page per class more,
// whole MiB, at least 8 MiB. reached is false when no point of the curve
// reaches the target (the memory is then the curve's largest point's).
func MemoryForCurve(curve []CurvePoint, target, waste float64, classes int) (bytes int64, reached bool) {
	if len(curve) == 0 {
		return 0, false
	}
	best := 1 - curve[len(curve)-1].MissRatio
	for _, c := range curve {
		best = max(best, 1-c.MissRatio)
	}
	want := best - KneeHitRatio
	if target > 0 {
		want = target
	}
	point, reached := curve[len(curve)-1].CacheBytes, false
	for _, c := range curve {
		if 1-c.MissRatio >= want-1e-9 {
			point, reached = c.CacheBytes, true
			break
		}
	}
	const mib = 1 << 20
	b := float64(point)/(1-min(waste, 0.9)) + float64(classes*profilePageBytes)
	return max(int64(math.Ceil(b/mib))*mib, 8*mib), reached
}

// ProfileState is what the decision carries from one observation to the
// next (status.recommendation).
type ProfileState struct {
	// Recommended classes, and how many observations in a row kept them.
	Recommended []int64
	Stable      int32
	// Applied are the observed classes the engine runs (nil: spec.engine's
	// ladder).
	Applied []int64
}

// Decision is one observation's outcome.
type Decision struct {
	State ProfileState
	// Apply: roll the pods to State.Applied now.
	Apply bool
	// Why, for the Event and status.recommendation.decision.
	Why string
	// Waste (shares of chunk bytes) of the recommended classes and of the
	// classes the pods run, on this observation's histogram.
	PredictedWaste, CurrentWaste float64
}

// DecideInput is everything Decide reads.
type DecideInput struct {
	Prev ProfileState
	Obs  Observation
	// Running are the classes the pods run now, slab_chunk_max included.
	Running  []int64
	ChunkMax int64
	Auto     bool
	// Settled: every desired pod is Ready and runs the current revision
	// (no roll under way), so a roll takes down one pod of a whole set.
	Settled bool
}

// Decide is the hysteresis of apply: Auto: the recommended classes stick
// while within StickWastePoints of the best; the pods roll to them only
// after StableObservationsToApply observations in a row kept them, when
// they waste at least MinApplyGainPoints less than the running classes,
// with every pod Ready and no roll under way.
func Decide(in DecideInput) Decision {
	d := Decision{State: in.Prev}
	d.State.Recommended = slices.Clone(in.Prev.Recommended)
	if !in.Auto {
		d.State.Applied = nil // apply: Manual runs spec.engine's ladder (WithObservedClasses)
	}
	if len(in.Obs.Classes) == 0 {
		d.Why = "no recommendation: " + strings.Join(in.Obs.Notes, "; ")
		if len(in.Prev.Recommended) > 0 {
			d.PredictedWaste = wasteShare(in.Obs.Sizes, withChunkMax(in.Prev.Recommended, in.ChunkMax))
			d.CurrentWaste = wasteShare(in.Obs.Sizes, in.Running)
		}
		return d
	}
	best := wasteShare(in.Obs.Sizes, withChunkMax(in.Obs.Classes, in.ChunkMax))
	kept := len(in.Prev.Recommended) > 0 &&
		100*(wasteShare(in.Obs.Sizes, withChunkMax(in.Prev.Recommended, in.ChunkMax))-best) <= StickWastePoints
	if kept {
		d.State.Stable = in.Prev.Stable + 1
	} else {
		d.State.Recommended, d.State.Stable = slices.Clone(in.Obs.Classes), 1
	}
	d.PredictedWaste = wasteShare(in.Obs.Sizes, withChunkMax(d.State.Recommended, in.ChunkMax))
	d.CurrentWaste = wasteShare(in.Obs.Sizes, in.Running)
	gain := 100 * (d.CurrentWaste - d.PredictedWaste)
	summary := fmt.Sprintf("recommended classes waste %.1f%% of chunk bytes, the running ones %.1f%% (gain %.1f points, apply needs %.1f); stable for %d observation(s) (apply needs %d)",
		100*d.PredictedWaste, 100*d.CurrentWaste, gain, MinApplyGainPoints, d.State.Stable, StableObservationsToApply)
	switch {
	case !in.Auto:
		d.Why = "apply: Manual, recommended only: " + summary
	case slices.Equal(in.Prev.Applied, d.State.Recommended):
		d.Why = "the pods run the recommended classes: " + summary
	case gain < MinApplyGainPoints:
		d.Why = "not applied, the gain is too small: " + summary
	case d.State.Stable < StableObservationsToApply:
		d.Why = "not applied yet, the recommendation is not stable long enough: " + summary
	case !in.Settled:
		d.Why = "not applied yet, a pod is not Ready or a roll is under way: " + summary
	default:
		d.Apply = true
		d.State.Applied = slices.Clone(d.State.Recommended)
		d.Why = "applied, rolling the pods: " + summary
	}
	return d
}

// ratio formats a hit ratio for status.
func ratio(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// percent formats a share as a percentage for status.
func percent(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) }

func int32s(in []int64) []int32 {
	var out []int32
	for _, v := range in {
		out = append(out, int32(v))
	}
	return out
}

func int64s(in []int32) []int64 {
	var out []int64
	for _, v := range in {
		out = append(out, int64(v))
	}
	return out
}

// ObservedState is the decision's state as status.recommendation keeps it.
func ObservedState(r *cachev1alpha1.Recommendation) ProfileState {
	if r == nil {
		return ProfileState{}
	}
	return ProfileState{Recommended: int64s(r.ChunkSizes), Stable: r.StableObservations, Applied: int64s(r.AppliedChunkSizes)}
}

// WithObservedClasses is the spec the engine runs under an Observed apply:
// Auto profile: the applied classes (status.recommendation) in place of the
// default ladder (the API leaves spec.engine's ladder unset with Auto).
// Otherwise s itself.
func WithObservedClasses(s *cachev1alpha1.CacheSpec, r *cachev1alpha1.Recommendation) *cachev1alpha1.CacheSpec {
	p := s.WorkloadProfile
	if p == nil || p.Source != cachev1alpha1.ProfileSourceObserved || p.Apply != cachev1alpha1.ProfileApplyAuto ||
		r == nil || len(r.AppliedChunkSizes) == 0 {
		return s
	}
	e := *s
	e.Engine.GrowthFactor, e.Engine.MinChunk = nil, nil
	e.Engine.ChunkSizes = slices.Clone(r.AppliedChunkSizes)
	return &e
}

// RecommendObserved is status.recommendation of an Observed profile after
// one read of the pods. s is the spec the pods run (WithObservedClasses);
// prev the status's recommendation before.
func RecommendObserved(s *cachev1alpha1.CacheSpec, prev *cachev1alpha1.Recommendation, pods []PodSample, settled bool) (*cachev1alpha1.Recommendation, Decision) {
	chunkMax := cachev1alpha1.SlabChunkMax(s.Memory.Value())
	obs := Observe(pods, s.Memory.Value())
	running := withChunkMax(ClassLadder(s), chunkMax)
	d := Decide(DecideInput{Prev: ObservedState(prev), Obs: obs, Running: running, ChunkMax: chunkMax,
		Auto: s.WorkloadProfile.Apply == cachev1alpha1.ProfileApplyAuto, Settled: settled})
	r := &cachev1alpha1.Recommendation{
		ChunkSizes:         int32s(d.State.Recommended),
		StableObservations: d.State.Stable,
		AppliedChunkSizes:  int32s(d.State.Applied),
		Applied:            len(d.State.Applied) > 0,
		Decision:           d.Why,
		ObservedItems:      int64(obs.Items),
	}
	notes := obs.Notes
	if len(d.State.Recommended) == 0 {
		r.Notes = strings.Join(notes, "; ")
		return r, d
	}
	r.PredictedWastePercent, r.CurrentWastePercent = percent(d.PredictedWaste), percent(d.CurrentWaste)
	recommended := withChunkMax(d.State.Recommended, chunkMax)
	memory := s.Memory.Value()
	recMemory := int64(0)
	if len(obs.Curve) > 0 {
		target := 0.0
		if t := s.WorkloadProfile.TargetHitRatio; t != nil {
			target, _ = strconv.ParseFloat(*t, 64)
		}
		var reached bool
		recMemory, reached = MemoryForCurve(obs.Curve, target, d.PredictedWaste, len(recommended))
		if !reached {
			notes = append(notes, fmt.Sprintf("no memory up to the curve's largest point (%d bytes of items) reaches the target hit ratio", obs.Curve[len(obs.Curve)-1].CacheBytes))
		}
		r.Memory = resourceBytes(recMemory)
		r.CurrentHitRatio = ratio(HitRatioAt(obs.Curve, memory, d.CurrentWaste))
		r.PredictedHitRatio = ratio(HitRatioAt(obs.Curve, recMemory, d.PredictedWaste))
	}
	for _, p := range pods {
		var sizes []SizeShare
		for _, sz := range p.Sizes {
			if sz.Bytes <= chunkMax {
				sizes = append(sizes, SizeShare{max(sz.Bytes, MinClassBytes), sz.Weight})
			}
		}
		sizes = mergeEqual(sizes)
		pr := cachev1alpha1.PodRecommendation{Name: p.Name}
		cur, pred := wasteShare(sizes, running), wasteShare(sizes, recommended)
		if len(sizes) > 0 {
			pr.CurrentWastePercent, pr.PredictedWastePercent = percent(cur), percent(pred)
		}
		if len(obs.Curve) > 0 && p.References > 0 && len(p.Curve) > 0 {
			pr.CurrentHitRatio = ratio(HitRatioAt(p.Curve, memory, cur))
			pr.PredictedHitRatio = ratio(HitRatioAt(p.Curve, recMemory, pred))
		}
		r.Pods = append(r.Pods, pr)
	}
	r.Notes = strings.Join(notes, "; ")
	return r, d
}

func resourceBytes(b int64) *resource.Quantity { return resource.NewQuantity(b, resource.BinarySI) }

// AdoptRunningClasses is status.recommendation for an Observed apply: Auto
// profile whose status holds no applied classes (a status lost, or a Cache
// that ran explicit classes before): the classes the running pods' arguments
// give (-o slab_sizes), so that the pods are not rolled back to the default
// ladder only to be rolled forward again. r itself otherwise.
func AdoptRunningClasses(s *cachev1alpha1.CacheSpec, r *cachev1alpha1.Recommendation, running []string) *cachev1alpha1.Recommendation {
	p := s.WorkloadProfile
	if p == nil || p.Source != cachev1alpha1.ProfileSourceObserved || p.Apply != cachev1alpha1.ProfileApplyAuto ||
		(r != nil && len(r.AppliedChunkSizes) > 0) {
		return r
	}
	var classes []int32
	for i, a := range running {
		if a != "-o" || i+1 == len(running) {
			continue
		}
		for _, opt := range strings.Split(running[i+1], ",") {
			list, ok := strings.CutPrefix(opt, "slab_sizes=")
			if !ok {
				continue
			}
			for _, n := range strings.Split(list, "-") {
				v, err := strconv.ParseInt(n, 10, 32)
				if err != nil || v <= 0 {
					return r
				}
				classes = append(classes, int32(v))
			}
		}
	}
	if len(classes) == 0 {
		return r
	}
	out := &cachev1alpha1.Recommendation{}
	if r != nil {
		out = r.DeepCopy()
	}
	out.AppliedChunkSizes, out.Applied = classes, true
	return out
}
