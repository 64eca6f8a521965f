package main

// The Grafana dashboard and the Prometheus rules may only use metrics docs/metrics.md
// defines (the contract with the code), and the dashboard must be importable: panels with
// targets, the datasource a template variable, unique ids.

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// contractMetrics reads the metric tables of docs/metrics.md: "| `name` | type | ...".
// Histograms also define name_bucket/_sum/_count.
func contractMetrics(path string) (map[string]bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	row := regexp.MustCompile("^\\|\\s*`(pdspark_[a-z0-9_]+)`\\s*\\|\\s*([a-z]+)")
	names := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		names[m[1]] = true
		if m[2] == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[m[1]+s] = true
			}
		}
	}
	return names, nil
}

var (
	metricRef   = regexp.MustCompile(`\bpdspark_[a-zA-Z0-9_]+`)
	recordedRef = regexp.MustCompile(`\bpdspark:[a-zA-Z0-9_:]+`)
)

// checkExpr reports metrics an expression uses that nothing defines.
func checkExpr(p *problems, where, expr string, metrics, recorded map[string]bool) {
	for _, m := range metricRef.FindAllString(expr, -1) {
		if !metrics[m] {
			p.add("%s uses %s, which docs/metrics.md does not define", where, m)
		}
	}
	for _, m := range recordedRef.FindAllString(expr, -1) {
		if !recorded[m] {
			p.add("%s uses %s, which no recording rule defines", where, m)
		}
	}
	// histogram_quantile needs the _bucket series grouped by le.
	if strings.Contains(expr, "histogram_quantile") &&
		(!strings.Contains(expr, "_bucket") || !regexp.MustCompile(`by \([^)]*\ble\b`).MatchString(expr)) {
		p.add("%s: histogram_quantile without a _bucket series summed by le: %s", where, expr)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func checkDashboard(p *problems, dashboardPath, metricsDoc, rulesPath string) {
	metrics, err := contractMetrics(metricsDoc)
	if err != nil || len(metrics) == 0 {
		p.add("cannot read the metric tables of %s: %v", metricsDoc, err)
		return
	}
	recorded := map[string]bool{}
	var rules ruleFile
	if data, err := os.ReadFile(rulesPath); err != nil {
		p.add("%v", err)
	} else if err := yaml.Unmarshal(data, &rules); err != nil {
		p.add("%s: %v", rulesPath, err)
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
			alerts[r.Alert] = true
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			checkExpr(p, "rule "+r.Record+r.Alert, r.Expr, metrics, recorded)
		}
	}
	for _, a := range []string{"PdsparkNoHealthyDecodeWorker", "PdsparkHighTTFTp99",
		"PdsparkKVTransferFailures", "PdsparkSpecAcceptanceCollapse"} {
		if !alerts[a] {
			p.add("rules lack alert %s", a)
		}
	}

	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		p.add("%v", err)
		return
	}
	var dash obj
	if err := json.Unmarshal(raw, &dash); err != nil {
		p.add("%s is not JSON: %v", dashboardPath, err)
		return
	}
	if str(dash["uid"]) == "" || str(dash["title"]) == "" {
		p.add("dashboard needs a uid and a title")
	}
	if dash["id"] != nil {
		p.add("dashboard must not pin an id (Grafana assigns it on import)")
	}
	dsVar := false
	for _, v := range list(get(dash, "templating", "list")) {
		if str(get(v, "name")) == "datasource" && str(get(v, "type")) == "datasource" && str(get(v, "query")) == "prometheus" {
			dsVar = true
		}
	}
	if !dsVar {
		p.add("dashboard lacks the templated Prometheus datasource variable \"datasource\"")
	}

	var all []obj
	for _, pn := range list(dash["panels"]) {
		all = append(all, asObj(pn))
		for _, sub := range list(get(pn, "panels")) { // panels inside collapsed rows
			all = append(all, asObj(sub))
		}
	}
	ids := map[string]bool{}
	cells := map[[2]int]string{} // 24-column grid: panels must not overlap
	var exprs strings.Builder
	for _, pn := range all {
		id, title := str(pn["id"]), str(pn["title"])
		if ids[id] || id == "" {
			p.add("panel %q: missing or duplicate id %s", title, id)
		}
		ids[id] = true
		if get(pn, "gridPos", "w") == nil || get(pn, "gridPos", "h") == nil {
			p.add("panel %q has no gridPos", title)
		}
		gx, gy := num(str(get(pn, "gridPos", "x"))), num(str(get(pn, "gridPos", "y")))
		gw, gh := num(str(get(pn, "gridPos", "w"))), num(str(get(pn, "gridPos", "h")))
		if gx+gw > 24 {
			p.add("panel %q is wider than the 24-column grid", title)
		}
		for x := gx; x < gx+gw; x++ {
			for y := gy; y < gy+gh; y++ {
				if other, taken := cells[[2]int{x, y}]; taken {
					p.add("panel %q overlaps %q", title, other)
					x, y = gx+gw, gy+gh
				} else {
					cells[[2]int{x, y}] = title
				}
			}
		}
		if str(pn["type"]) == "row" {
			continue
		}
		if title == "" {
			p.add("panel %s has no title", id)
		}
		if str(get(pn, "datasource", "uid")) != "${datasource}" {
			p.add("panel %q must use the ${datasource} variable", title)
		}
		targets := list(pn["targets"])
		if len(targets) == 0 {
			p.add("panel %q has no targets", title)
		}
		for _, t := range targets {
			expr := str(get(t, "expr"))
			if expr == "" || str(get(t, "refId")) == "" {
				p.add("panel %q: target without expr or refId", title)
			}
			if str(get(t, "datasource", "uid")) != "${datasource}" {
				p.add("panel %q: target must use the ${datasource} variable", title)
			}
			checkExpr(p, "panel \""+title+"\"", expr, metrics, recorded)
			exprs.WriteString(expr + "\n")
		}
	}
	// What operators are promised to see (issue 9 and docs/metrics.md).
	all2 := exprs.String()
	for _, need := range []string{
		"pdspark_requests_total", "pdspark_generation_tokens_total",
		"pdspark_time_to_first_token_seconds_bucket", "pdspark_time_per_output_token_seconds_bucket",
		"pdspark_inter_token_latency_seconds_bucket", "pdspark_e2e_request_latency_seconds_bucket",
		"sum(rate(pdspark_spec_decode_accepted_tokens_total[$__rate_interval])) / sum(rate(pdspark_spec_decode_draft_tokens_total[$__rate_interval]))",
		"1 + sum(rate(pdspark_spec_decode_accepted_tokens_total[$__rate_interval])) / sum(rate(pdspark_spec_decode_drafts_total[$__rate_interval]))",
		"pdspark_spec_decode_accepted_per_position_total", "pdspark_spec_decode_verify_length",
		"pdspark_cache_usage_ratio", "pdspark_kv_transfer_bytes_total", "pdspark_kv_transfer_seconds_bucket",
		"pdspark_kv_transfer_failures_total", "pdspark_kv_transfer_stalls_total", "pdspark_workers",
		"pdspark_queue_depth", "pdspark_rejections_total",
		"pdspark_decode_step_seconds_bucket", "pdspark_decode_batch_size_sum",
		"pdspark_prefill_seconds_bucket", "pdspark_prefill_prompt_tokens_total",
		"pdspark_prefill_waiting_requests", "pdspark_decode_waiting_requests",
		"pdspark_cache_reserved_bytes", "pdspark_kv_active_reservations",
		"pdspark_kv_expired_leases_total", "pdspark_kv_link_handshakes_total", "pdspark_transport_info",
	} {
		if !strings.Contains(all2, need) {
			p.add("dashboard has no panel using %s", need)
		}
	}
}
