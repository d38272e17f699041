package metrics

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// funcCollector is a gauge family whose values a callback gives at scrape
// time, one label value per map key. Before the callback is set it reports
// nothing, which tells an operator the core does not feed it (yet).
type funcCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	f    func() map[string]int
}

func newFuncCollector(d *prometheus.Desc) *funcCollector { return &funcCollector{desc: d} }

func (c *funcCollector) set(f func() map[string]int) {
	c.mu.Lock()
	c.f = f
	c.mu.Unlock()
}

func (c *funcCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *funcCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	f := c.f
	c.mu.Unlock()
	if f == nil {
		return
	}
	for label, v := range f() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(v), label)
	}
}

func nan() float64 { return math.NaN() }
