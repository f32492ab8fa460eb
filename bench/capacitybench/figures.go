package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/berth-sh/berth/bench/internal/figure"
)

// writeFigures writes run 1's figures into dir: replicas.svg (each mode's replicas per
// target and its pending groups over the run), ttft.svg (each request's TTFT by when it
// was sent, against the SLO), and the raw numbers: timeline.csv (every watcher sample) and
// requests.csv (every request).
func writeFigures(dir string, c config, results []result) error {
	timeline := figure.NewTable("mode", "second", "cheap_replicas", "dear_replicas", "pending_groups", "ready_pods")
	requests := figure.NewTable("mode", "sent_s", "ttft_s", "error")
	replicas := figure.Line{Title: "Replicas asked for and groups pending (run 1)", XLabel: "seconds", YLabel: "replicas / groups"}
	ttft := figure.Line{Title: "TTFT by when the request was sent (run 1)", XLabel: "seconds", YLabel: "TTFT, seconds", LogY: true}
	for _, r := range results {
		if r.run != 1 {
			continue
		}
		var xs, cheap, dear, pending []float64
		for _, s := range r.samples {
			timeline.Add(r.mode, s.at, s.cheap, s.dear, s.pending, s.ready)
			xs = append(xs, s.at.Seconds())
			cheap = append(cheap, float64(s.cheap))
			dear = append(dear, float64(s.dear))
			pending = append(pending, float64(s.pending))
		}
		replicas.Series = append(replicas.Series,
			figure.Series{Name: r.mode + " cheap", X: xs, Y: cheap},
			figure.Series{Name: r.mode + " dear", X: xs, Y: dear},
			figure.Series{Name: r.mode + " pending", X: xs, Y: pending})
		var sent, secs []float64
		for _, q := range r.requests {
			msg := ""
			if q.err != nil {
				msg = q.err.Error()
			}
			requests.Add(r.mode, q.at, q.ttft, msg)
			if q.err == nil {
				sent = append(sent, q.at.Seconds())
				secs = append(secs, q.ttft.Seconds())
			}
		}
		ttft.Series = append(ttft.Series, figure.Series{Name: r.mode, X: sent, Y: secs})
	}
	if len(ttft.Series) == 0 {
		return fmt.Errorf("no run 1 to draw")
	}
	end := (2*c.lowFor + c.highFor + time.Minute).Seconds()
	ttft.Series = append(ttft.Series, figure.Series{Name: "SLO", X: []float64{0, end}, Y: []float64{c.slo.Seconds(), c.slo.Seconds()}})
	if err := figure.Save(filepath.Join(dir, "replicas.svg"), replicas); err != nil {
		return err
	}
	if err := figure.Save(filepath.Join(dir, "ttft.svg"), ttft); err != nil {
		return err
	}
	if err := timeline.WriteFile(filepath.Join(dir, "timeline.csv")); err != nil {
		return err
	}
	return requests.WriteFile(filepath.Join(dir, "requests.csv"))
}
