package main

// A Helm 3 look-alike renderer: text/template + sprig with Helm's own additions (include,
// tpl, required, toYaml, fromYaml, lookup), Helm's value handling (values read through
// JSON, so every number is a float64; overrides coalesced onto defaults, null deletes a
// key) and Helm's built-in objects (Values, Release, Chart, Capabilities, Files, Template).
// Its job is to fail where `helm template` would, so the chart stays real-Helm correct.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	yaml2 "gopkg.in/yaml.v2"
	"gopkg.in/yaml.v3"
)

type ChartMeta struct {
	APIVersion  string   `yaml:"apiVersion"`
	Name        string   `yaml:"name"`
	Version     string   `yaml:"version"`
	AppVersion  string   `yaml:"appVersion"`
	Description string   `yaml:"description"`
	Type        string   `yaml:"type"`
	Home        string   `yaml:"home"`
	Keywords    []string `yaml:"keywords"`
	Sources     []string `yaml:"sources"`
}

type Release struct {
	Name      string
	Namespace string
	Service   string
	IsInstall bool
	IsUpgrade bool
	Revision  int
}

// APIVersions mirrors chartutil.VersionSet: Has matches "group/version" or
// "group/version/Kind".
type APIVersions []string

func (a APIVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

type KubeVersion struct {
	Version    string
	Major      string
	Minor      string
	GitVersion string
}

type Capabilities struct {
	APIVersions APIVersions
	KubeVersion KubeVersion
}

// Files is .Files: every chart file outside templates/.
type Files map[string][]byte

func (f Files) Get(name string) string      { return string(f[name]) }
func (f Files) GetBytes(name string) []byte { return f[name] }

type TemplateInfo struct {
	Name     string
	BasePath string
}

type RenderOptions struct {
	ChartDir    string
	ValueFiles  []string
	ReleaseName string
	Namespace   string
	APIVersions []string
}

// Rendered is one non-empty output file of the chart.
type Rendered struct {
	Source  string // "pdspark/templates/x.yaml"
	Content string
}

// helmJSON converts a YAML-decoded value the way sigs.k8s.io/yaml does for Helm: through
// JSON, so maps have string keys and numbers are float64.
func helmJSON(v interface{}) (map[string]interface{}, error) {
	data, err := json.Marshal(stringKeys(v))
	if err != nil {
		return nil, err
	}
	out := map[string]interface{}{}
	if string(data) == "null" {
		return out, nil
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func stringKeys(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		m := map[string]interface{}{}
		for k, x := range t {
			m[k] = stringKeys(x)
		}
		return m
	case map[interface{}]interface{}:
		m := map[string]interface{}{}
		for k, x := range t {
			m[fmt.Sprint(k)] = stringKeys(x)
		}
		return m
	case []interface{}:
		l := make([]interface{}, len(t))
		for i, x := range t {
			l[i] = stringKeys(x)
		}
		return l
	}
	return v
}

func readValues(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw interface{}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return helmJSON(raw)
}

// coalesce applies override onto base as Helm does: maps merge recursively, anything
// else replaces, and an explicit null deletes the key.
func coalesce(base, override map[string]interface{}) {
	for k, ov := range override {
		if ov == nil {
			delete(base, k)
			continue
		}
		om, oIsMap := ov.(map[string]interface{})
		bm, bIsMap := base[k].(map[string]interface{})
		if oIsMap && bIsMap {
			coalesce(bm, om)
			continue
		}
		base[k] = ov
	}
}

// toYAML is Helm's toYaml: JSON first (sigs.k8s.io/yaml), then YAML with sorted keys, no
// trailing newline. Whole float64 numbers come out as integers this way.
func toYAML(v interface{}) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	var ms yaml2.MapSlice
	var generic interface{}
	var out []byte
	if len(data) > 0 && data[0] == '{' {
		if err := yaml2.Unmarshal(data, &ms); err != nil {
			return "", err
		}
		out, err = yaml2.Marshal(ms)
	} else {
		if err := yaml2.Unmarshal(data, &generic); err != nil {
			return "", err
		}
		out, err = yaml2.Marshal(generic)
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(out), "\n"), nil
}

func fromYAML(s string) map[string]interface{} {
	var raw interface{}
	if err := yaml.Unmarshal([]byte(s), &raw); err != nil {
		return map[string]interface{}{"Error": err.Error()}
	}
	m, err := helmJSON(raw)
	if err != nil {
		return map[string]interface{}{"Error": err.Error()}
	}
	return m
}

func loadChart(dir string) (ChartMeta, Files, map[string]string, error) {
	var meta ChartMeta
	data, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return meta, nil, nil, err
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return meta, nil, nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	if meta.APIVersion != "v2" || meta.Name == "" || meta.Version == "" {
		return meta, nil, nil, fmt.Errorf("Chart.yaml needs apiVersion v2, name and version")
	}
	files := Files{}
	templates := map[string]string{}
	// filepath.Walk does not descend into symlinked directories, but symlinked files are
	// read through (os.ReadFile follows links), as Helm's loader does.
	err = filepath.Walk(dir, func(path string, info fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		content, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("%s: %w (dangling link?)", rel, err)
		}
		if strings.HasPrefix(rel, "templates/") {
			templates[rel] = string(content)
		} else {
			files[rel] = content
		}
		return nil
	})
	return meta, files, templates, err
}

func render(opts RenderOptions) ([]Rendered, error) {
	meta, files, templates, err := loadChart(opts.ChartDir)
	if err != nil {
		return nil, err
	}
	values, err := readValues(filepath.Join(opts.ChartDir, "values.yaml"))
	if err != nil {
		return nil, err
	}
	for _, f := range opts.ValueFiles {
		ov, err := readValues(f)
		if err != nil {
			return nil, err
		}
		coalesce(values, ov)
	}

	root := template.New("gotpl").Option("missingkey=zero")
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env") // Helm removes these for reproducible output
	delete(funcs, "expandenv")
	includeDepth := 0
	funcs["include"] = func(name string, data interface{}) (string, error) {
		if includeDepth > 1000 {
			return "", fmt.Errorf("include %q: recursion too deep", name)
		}
		includeDepth++
		defer func() { includeDepth-- }()
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		clone, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err := clone.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", err
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, fmt.Errorf("%s", msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, fmt.Errorf("%s", msg)
		}
		return v, nil
	}
	funcs["toYaml"] = func(v interface{}) string { s, _ := toYAML(v); return s }
	funcs["fromYaml"] = fromYAML
	funcs["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil // helm template has no cluster either
	}
	root.Funcs(funcs)

	names := make([]string, 0, len(templates))
	for n := range templates {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		full := meta.Name + "/" + n
		if _, err := root.New(full).Parse(templates[n]); err != nil {
			return nil, fmt.Errorf("parse %s: %w", full, err)
		}
	}

	release := Release{Name: opts.ReleaseName, Namespace: opts.Namespace, Service: "Helm",
		IsInstall: true, Revision: 1}
	caps := Capabilities{
		APIVersions: append(APIVersions{"v1", "apps/v1", "policy/v1", "networking.k8s.io/v1"},
			opts.APIVersions...),
		KubeVersion: KubeVersion{Version: "v1.30.0", Major: "1", Minor: "30", GitVersion: "v1.30.0"},
	}
	var out []Rendered
	for _, n := range names {
		base := filepath.Base(n)
		if strings.HasPrefix(base, "_") {
			continue // partials only hold defines
		}
		full := meta.Name + "/" + n
		top := map[string]interface{}{
			"Values":       values,
			"Release":      release,
			"Chart":        meta,
			"Capabilities": caps,
			"Files":        files,
			"Template":     TemplateInfo{Name: full, BasePath: meta.Name + "/templates"},
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, full, top); err != nil {
			return nil, fmt.Errorf("render %s: %w", full, err)
		}
		content := buf.String()
		// Helm silently blanks "<no value>"; here it means a misspelt value path.
		if strings.Contains(content, "<no value>") {
			return nil, fmt.Errorf("render %s: output contains <no value> (missing value)", full)
		}
		if base == "NOTES.txt" || strings.TrimSpace(content) == "" {
			continue
		}
		out = append(out, Rendered{Source: full, Content: content})
	}
	return out, nil
}

// manifestText joins the rendered files the way `helm template` prints them.
func manifestText(files []Rendered) string {
	var b strings.Builder
	for _, f := range files {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", f.Source, strings.TrimLeft(f.Content, "\n"))
	}
	return b.String()
}
