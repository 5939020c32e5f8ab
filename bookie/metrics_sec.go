package bookie

import "github.com/prometheus/client_golang/prometheus"

// registerLimitMetrics exports the totals the connection limits keep
// (docs/security.md, "Limits"): connections not yet authenticated, reply
// bytes not yet written and parked long polls.
func (b *Bookie) registerLimitMetrics() {
	b.metrics.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "bookie_unauthenticated_connections",
			Help: "Connections that have not completed their Hello and, with a cluster secret, their AUTH.",
		}, func() float64 { return float64(b.conns.unauthenticated()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "bookie_outbound_bytes",
			Help: "Reply bytes handed to the connections and not yet written to their sockets (bounded by max_inflight_bytes).",
		}, func() float64 { return float64(b.conns.outbound.bytes.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "bookie_parked_polls",
			Help: "Long-poll LAC reads waiting for their ledger's LAC to move or their timeout.",
		}, func() float64 { return float64(b.conns.polls.count.Load()) }),
	)
}
