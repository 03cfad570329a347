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

package utils

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// DashboardQueries are the PromQL of every panel of the chart's Grafana
// dashboard (charts/cachet/files/dashboards/cachet.json under repoRoot),
// nested rows included, with its variables set the way Grafana would for one
// Cache: namespace and cache as given, every pod, and fixed intervals. Keys
// name the panel and target. test/promql and the e2e's stage 15 both run
// them, so a panel that cannot return data fails a test.
func DashboardQueries(t testing.TB, repoRoot, namespace, cache string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "charts", "cachet", "files", "dashboards", "cachet.json"))
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	vars := strings.NewReplacer(
		"$namespace", namespace, "${namespace}", namespace,
		"$cache", cache, "${cache}", cache,
		"$pod", ".*", "${pod}", ".*",
		"$__rate_interval", "1m", "${__rate_interval}", "1m",
		"$__interval", "15s", "${__interval}", "15s",
		"$__range", "5m", "${__range}", "5m",
	)
	out := map[string]string{}
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("dashboard panel: %v", err)
			}
			for i, tg := range p.Targets {
				if tg.Expr != "" {
					out[fmt.Sprintf("dashboard panel %q target %d", p.Title, i)] = vars.Replace(tg.Expr)
				}
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}
