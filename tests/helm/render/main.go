// Command render renders a Helm chart's templates the way `helm template`
// does, with Go's text/template and sprig, for environments without a helm
// binary. It implements only the Helm built-ins the inboxd chart uses:
// .Values (values.yaml deep-merged with -f files), .Release, .Chart,
// .Template, include, tpl, required, toYaml, fromYaml, toJson (sprig), fail
// (sprig) and lookup (always empty, as in `helm template`).
//
// Usage: render -chart DIR [-f values.yaml ...] [-name RELEASE] [-namespace NS]
//
// Output on stdout, one JSON document:
//
//	{"ok": true, "manifests": [{"source": "...", "text": "...", "objects": [...]}], "notes": "..."}
//
// or, when rendering fails (a `required` or `fail` fired, a template error):
//
//	{"ok": false, "error": "..."}
//
// The exit status is 0 in both cases and 1 only for usage or I/O errors, so
// callers can assert on expected failures.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"gopkg.in/yaml.v3"
)

type valueFiles []string

func (v *valueFiles) String() string     { return strings.Join(*v, ",") }
func (v *valueFiles) Set(s string) error { *v = append(*v, s); return nil }

type manifest struct {
	Source  string        `json:"source"`
	Text    string        `json:"text"`
	Objects []interface{} `json:"objects"`
}

type result struct {
	OK        bool       `json:"ok"`
	Error     string     `json:"error,omitempty"`
	Manifests []manifest `json:"manifests,omitempty"`
	Notes     string     `json:"notes,omitempty"`
	// Values are the merged values the templates saw, for assertions.
	Values map[string]interface{} `json:"values,omitempty"`
}

func main() {
	var files valueFiles
	chartDir := flag.String("chart", "", "chart directory")
	name := flag.String("name", "inboxd", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	flag.Var(&files, "f", "values file to merge over values.yaml (repeatable)")
	flag.Parse()
	if *chartDir == "" {
		fmt.Fprintln(os.Stderr, "usage: render -chart DIR [-f values.yaml ...] [-name R] [-namespace NS]")
		os.Exit(1)
	}
	res, err := render(*chartDir, files, *name, *namespace)
	if err != nil {
		var re renderError
		if !errors.As(err, &re) {
			fmt.Fprintln(os.Stderr, "render:", err)
			os.Exit(1)
		}
		res = result{OK: false, Error: err.Error()}
	}
	out, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
	os.Stdout.Write(append(out, '\n'))
}

// renderError marks a failure of the chart itself, as opposed to I/O.
type renderError struct{ err error }

func (e renderError) Error() string { return e.err.Error() }

func readYAML(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m map[string]interface{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if m == nil {
		m = map[string]interface{}{}
	}
	return normalize(m).(map[string]interface{}), nil
}

// normalize makes values look as Helm's do: Helm reads YAML through JSON, so
// every number is a float64 and every map is map[string]interface{}.
func normalize(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		for k, x := range t {
			t[k] = normalize(x)
		}
		return t
	case map[interface{}]interface{}:
		m := map[string]interface{}{}
		for k, x := range t {
			m[fmt.Sprint(k)] = normalize(x)
		}
		return m
	case []interface{}:
		for i, x := range t {
			t[i] = normalize(x)
		}
		return t
	case int:
		return float64(t)
	case int64:
		return float64(t)
	case uint64:
		return float64(t)
	}
	return v
}

// merge overlays src on dst as Helm merges -f files: maps merge key by key,
// anything else replaces, and an explicit null deletes the key.
func merge(dst, src map[string]interface{}) {
	for k, sv := range src {
		if sv == nil {
			delete(dst, k)
			continue
		}
		sm, sIsMap := sv.(map[string]interface{})
		dm, dIsMap := dst[k].(map[string]interface{})
		if sIsMap && dIsMap {
			merge(dm, sm)
		} else {
			dst[k] = sv
		}
	}
}

func chartMeta(dir string) (map[string]interface{}, error) {
	raw, err := readYAML(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	// Helm exposes Chart.yaml fields with Go field names.
	names := map[string]string{
		"apiVersion": "APIVersion", "name": "Name", "version": "Version",
		"appVersion": "AppVersion", "description": "Description", "type": "Type",
		"kubeVersion": "KubeVersion", "keywords": "Keywords", "home": "Home",
	}
	meta := map[string]interface{}{}
	for k, v := range raw {
		if n, ok := names[k]; ok {
			meta[n] = v
		}
	}
	return meta, nil
}

// chartFiles is Helm's .Files: Get reads a file of the chart ("" when absent).
type chartFiles struct{ dir string }

func (f chartFiles) Get(name string) string {
	data, err := os.ReadFile(filepath.Join(f.dir, filepath.Clean("/"+name)))
	if err != nil {
		return ""
	}
	return string(data)
}

func toYAML(v interface{}) string {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	enc.Close()
	return strings.TrimSuffix(buf.String(), "\n")
}

func render(chartDir string, files []string, name, namespace string) (result, error) {
	values, err := readYAML(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return result{}, err
	}
	for _, f := range files {
		over, err := readYAML(f)
		if err != nil {
			return result{}, err
		}
		merge(values, over)
	}
	meta, err := chartMeta(chartDir)
	if err != nil {
		return result{}, err
	}
	chartName := fmt.Sprint(meta["Name"])

	paths, err := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	if err != nil {
		return result{}, err
	}
	sort.Strings(paths)

	root := template.New("chart")
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env") // Helm removes these: a chart must not read the renderer's environment
	delete(funcs, "expandenv")
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return v, errors.New(msg)
		}
		return v, nil
	}
	funcs["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	funcs["include"] = func(string, interface{}) (string, error) { return "", nil }
	funcs["tpl"] = func(string, interface{}) (string, error) { return "", nil }
	root.Funcs(funcs)
	// include and tpl need the parsed set, so they close over root.
	root.Funcs(template.FuncMap{
		"include": func(tname string, data interface{}) (string, error) {
			var buf bytes.Buffer
			if err := root.ExecuteTemplate(&buf, tname, data); err != nil {
				return "", err
			}
			return buf.String(), nil
		},
		"tpl": func(text string, data interface{}) (string, error) {
			t, err := root.Clone()
			if err != nil {
				return "", err
			}
			t, err = t.New("tpl").Parse(text)
			if err != nil {
				return "", err
			}
			var buf bytes.Buffer
			if err := t.Execute(&buf, data); err != nil {
				return "", err
			}
			return buf.String(), nil
		},
	})
	root.Option("missingkey=zero")

	var names []string
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return result{}, err
		}
		tname := chartName + "/templates/" + filepath.Base(p)
		if _, err := root.New(tname).Parse(string(data)); err != nil {
			return result{}, renderError{err}
		}
		names = append(names, tname)
	}

	res := result{OK: true, Values: values}
	for _, tname := range names {
		base := filepath.Base(tname)
		if strings.HasPrefix(base, "_") {
			continue
		}
		ctx := map[string]interface{}{
			"Values": values,
			"Chart":  meta,
			"Release": map[string]interface{}{
				"Name": name, "Namespace": namespace, "Service": "Helm",
				"IsInstall": true, "IsUpgrade": false, "Revision": 1,
			},
			"Template": map[string]interface{}{"Name": tname, "BasePath": chartName + "/templates"},
			"Files":    chartFiles{chartDir},
			"Capabilities": map[string]interface{}{
				"KubeVersion": map[string]interface{}{"Version": "v1.29.0", "Major": "1", "Minor": "29"},
			},
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, tname, ctx); err != nil {
			return result{}, renderError{err}
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if base == "NOTES.txt" {
			res.Notes = text
			continue
		}
		m := manifest{Source: tname, Text: text, Objects: []interface{}{}}
		dec := yaml.NewDecoder(strings.NewReader(text))
		for {
			var obj interface{}
			err := dec.Decode(&obj)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return result{}, renderError{fmt.Errorf("%s: rendered YAML does not parse: %w", tname, err)}
			}
			if obj == nil {
				continue
			}
			m.Objects = append(m.Objects, jsonable(obj))
		}
		if strings.TrimSpace(text) != "" {
			res.Manifests = append(res.Manifests, m)
		}
	}
	return res, nil
}

// jsonable turns yaml.v3 output into something encoding/json accepts.
func jsonable(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		for k, x := range t {
			t[k] = jsonable(x)
		}
		return t
	case map[interface{}]interface{}:
		m := map[string]interface{}{}
		for k, x := range t {
			m[fmt.Sprint(k)] = jsonable(x)
		}
		return m
	case []interface{}:
		for i, x := range t {
			t[i] = jsonable(x)
		}
		return t
	}
	return v
}
