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
	"net/http"
	"net/url"
	"strings"
	"time"
)

// PromResponse is the Prometheus HTTP API's answer to an instant query.
type PromResponse struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	} `json:"data"`
}

// Results are the result series as text, for failure messages.
func (r PromResponse) Results() []string {
	out := make([]string, len(r.Data.Result))
	for i, s := range r.Data.Result {
		out[i] = string(s)
	}
	return out
}

// PromGet decodes the JSON Prometheus at base answers on path.
func PromGet(base, path string, into any) error {
	client := http.Client{Timeout: 15 * time.Second}
	resp, err := client.Get(base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(into)
}

// PromQuery runs an instant query; a query Prometheus refuses is an error.
func PromQuery(base, q string) (PromResponse, error) {
	var r PromResponse
	if err := PromGet(base, "/api/v1/query?query="+url.QueryEscape(q), &r); err != nil {
		return r, err
	}
	if r.Status != "success" {
		return r, fmt.Errorf("%s", r.Error)
	}
	return r, nil
}

// RulesLoaded reports whether Prometheus has loaded the rule groups of the
// rule files fromFile picks, with at least one rule, every one evaluated
// with health ok; names are the rules found.
func RulesLoaded(base string, fromFile func(file string) bool) (names []string, ok bool, state string) {
	var r struct {
		Data struct {
			Groups []struct {
				File  string `json:"file"`
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := PromGet(base, "/api/v1/rules", &r); err != nil {
		return nil, false, err.Error()
	}
	var states []string
	healthy := true
	for _, g := range r.Data.Groups {
		if !fromFile(g.File) {
			continue
		}
		for _, rule := range g.Rules {
			names = append(names, rule.Name)
			states = append(states, fmt.Sprintf("%s:%s %s", rule.Name, rule.Health, rule.LastError))
			healthy = healthy && rule.Health == "ok"
		}
	}
	return names, healthy && len(names) > 0, fmt.Sprintf("%d rules: %s", len(names), strings.Join(states, "; "))
}
