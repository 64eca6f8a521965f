package main

// Checks on the rendered manifests: they parse, the expected objects exist, and what the
// pods run agrees with itself (flags vs container ports vs probes vs Services).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

type obj = map[string]interface{}

type doc struct {
	Source string
	Kind   string
	Name   string
	Body   obj
}

// get walks a path of map keys and list indices ("spec", "template", 0, ...).
func get(v interface{}, path ...interface{}) interface{} {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(obj)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]interface{})
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v interface{}) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func list(v interface{}) []interface{} { l, _ := v.([]interface{}); return l }
func asObj(v interface{}) obj          { m, _ := v.(obj); return m }

func parseDocs(p *problems, files []Rendered) []doc {
	var docs []doc
	dns := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	for _, f := range files {
		dec := yaml.NewDecoder(bytes.NewReader([]byte(f.Content)))
		for {
			var raw interface{}
			err := dec.Decode(&raw)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				p.add("%s: not valid YAML: %v", f.Source, err)
				break
			}
			if raw == nil {
				continue
			}
			body, err := helmJSON(raw)
			if err != nil {
				p.add("%s: %v", f.Source, err)
				continue
			}
			d := doc{Source: f.Source, Kind: str(body["kind"]), Name: str(get(body, "metadata", "name")), Body: body}
			if str(body["apiVersion"]) == "" || d.Kind == "" || d.Name == "" {
				p.add("%s: document without apiVersion, kind or metadata.name", f.Source)
				continue
			}
			if len(d.Name) > 63 || !dns.MatchString(d.Name) {
				p.add("%s %s: name is not a DNS label", d.Kind, d.Name)
			}
			docs = append(docs, d)
		}
	}
	return docs
}

// container is one container of a workload with its args split into flags.
type container struct {
	Workload string
	Role     string // app.kubernetes.io/component
	Pod      obj
	C        obj
	Flags    map[string]string
	Order    []string
}

func splitArgs(args []interface{}) (map[string]string, []string) {
	flags := map[string]string{}
	var order []string
	for i := 0; i < len(args); i++ {
		a := str(args[i])
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, val := a, ""
		if eq := strings.IndexByte(a, '='); eq > 0 {
			name, val = a[:eq], a[eq+1:]
		} else if i+1 < len(args) && !strings.HasPrefix(str(args[i+1]), "--") {
			val = str(args[i+1])
			i++
		}
		flags[name] = val
		order = append(order, name)
	}
	return flags, order
}

func containers(docs []doc) []container {
	var out []container
	for _, d := range docs {
		if d.Kind != "Deployment" && d.Kind != "StatefulSet" {
			continue
		}
		pod := asObj(get(d.Body, "spec", "template", "spec"))
		role := str(get(d.Body, "spec", "template", "metadata", "labels", "app.kubernetes.io/component"))
		for _, c := range list(pod["containers"]) {
			flags, order := splitArgs(list(get(c, "args")))
			out = append(out, container{Workload: d.Kind + "/" + d.Name, Role: role, Pod: pod,
				C: asObj(c), Flags: flags, Order: order})
		}
	}
	return out
}

func containerPort(c obj, name string) string {
	for _, p := range list(c["ports"]) {
		if str(get(p, "name")) == name {
			return str(get(p, "containerPort"))
		}
	}
	return ""
}

func labelsMatch(selector, labels obj) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if str(labels[k]) != str(v) {
			return false
		}
	}
	return true
}

func checkProbe(p *problems, c container, probe, path, port string) {
	pr := asObj(c.C[probe])
	if pr == nil {
		p.add("%s: no %s", c.Workload, probe)
		return
	}
	if path == "" {
		if str(get(pr, "tcpSocket", "port")) != port && str(get(pr, "httpGet", "port")) != port {
			p.add("%s: %s must target port %s", c.Workload, probe, port)
		}
		return
	}
	if got := str(get(pr, "httpGet", "path")); got != path {
		p.add("%s: %s path %q, want %q", c.Workload, probe, got, path)
	}
	if got := str(get(pr, "httpGet", "port")); got != port || containerPort(c.C, got) == "" {
		p.add("%s: %s port %q, want container port %q", c.Workload, probe, got, port)
	}
}

func num(s string) int { n, _ := strconv.Atoi(s); return n }

func checkChart(p *problems, files []Rendered, profile, routerKind string, monitoringAPI bool, dashboardPath string) {
	docs := parseDocs(p, files)
	kinds := map[string]int{}
	for _, d := range docs {
		kinds[d.Kind]++
	}
	want := map[string]int{"Deployment": 1, "StatefulSet": 2, "Service": 4, "ConfigMap": 1,
		"PodDisruptionBudget": 3}
	if routerKind == "StatefulSet" {
		want["Deployment"], want["StatefulSet"] = 0, 3
	}
	if monitoringAPI {
		want["ServiceMonitor"], want["PrometheusRule"] = 1, 1
	} else {
		want["ServiceMonitor"], want["PrometheusRule"] = 0, 0
	}
	for k, n := range want {
		if kinds[k] != n {
			p.add("%d %s objects, want %d", kinds[k], k, n)
		}
	}

	cs := containers(docs)
	byRole := map[string]container{}
	for _, c := range cs {
		byRole[c.Role] = c
	}
	router, ok := byRole["router"]
	if !ok {
		p.add("no router container")
		return
	}
	for _, role := range []string{"prefill", "decode"} {
		if _, ok := byRole[role]; !ok {
			p.add("no %s container", role)
			return
		}
	}

	// Router: ports equal flags; probes on the http port.
	if containerPort(router.C, "http") != router.Flags["--http-port"] || router.Flags["--http-port"] == "" {
		p.add("router http containerPort %q != --http-port %q", containerPort(router.C, "http"), router.Flags["--http-port"])
	}
	if containerPort(router.C, "grpc") != router.Flags["--grpc-port"] || router.Flags["--grpc-port"] == "" {
		p.add("router grpc containerPort %q != --grpc-port %q", containerPort(router.C, "grpc"), router.Flags["--grpc-port"])
	}
	checkProbe(p, router, "readinessProbe", "/health", "http")
	checkProbe(p, router, "livenessProbe", "", "http")
	checkProbe(p, router, "startupProbe", "", "http")
	routerGRPC := router.Flags["--grpc-port"]

	var routerHeadless string
	for _, d := range docs {
		if d.Kind == "Service" && str(get(d.Body, "spec", "selector", "app.kubernetes.io/component")) == "router" &&
			str(get(d.Body, "spec", "clusterIP")) == "None" {
			routerHeadless = d.Name
			if get(d.Body, "spec", "publishNotReadyAddresses") != true {
				p.add("router headless Service must publish not-ready routers (workers register before routers are ready)")
			}
		}
	}
	if routerHeadless == "" {
		p.add("no headless Service for the routers")
	}

	for _, role := range []string{"prefill", "decode"} {
		c := byRole[role]
		if containerPort(c.C, "grpc") != c.Flags["--port"] || c.Flags["--port"] == "" {
			p.add("%s grpc containerPort %q != --port %q", role, containerPort(c.C, "grpc"), c.Flags["--port"])
		}
		if containerPort(c.C, "metrics") != c.Flags["--metrics-port"] || c.Flags["--metrics-port"] == "" {
			p.add("%s metrics containerPort %q != --metrics-port %q", role, containerPort(c.C, "metrics"), c.Flags["--metrics-port"])
		}
		checkProbe(p, c, "readinessProbe", "/ready", "metrics")
		checkProbe(p, c, "livenessProbe", "/live", "metrics")
		checkProbe(p, c, "startupProbe", "/live", "metrics")
		if !strings.HasSuffix(c.Flags["--advertise-address"], ":"+c.Flags["--port"]) {
			p.add("%s --advertise-address %q does not end in --port %s", role, c.Flags["--advertise-address"], c.Flags["--port"])
		}
		// Deployment router: the headless Service name; StatefulSet router: every pod's name.
		addrs := strings.Split(c.Flags["--router"], ",")
		routerName := strings.SplitN(router.Workload, "/", 2)[1]
		if routerKind == "StatefulSet" {
			replicas := num(str(get(workload(docs, router.Workload), "spec", "replicas")))
			if len(addrs) != replicas {
				p.add("%s --router lists %d routers, the StatefulSet has %d", role, len(addrs), replicas)
			}
		}
		for i, addr := range addrs {
			if !strings.HasSuffix(addr, ":"+routerGRPC) {
				p.add("%s --router %q is not on the router gRPC port %s", role, addr, routerGRPC)
			}
			prefix := routerHeadless + "."
			if routerKind == "StatefulSet" {
				prefix = fmt.Sprintf("%s-%d.%s.", routerName, i, routerHeadless)
			}
			if routerHeadless != "" && !strings.HasPrefix(addr, prefix) {
				p.add("%s --router %q should start with %s", role, addr, prefix)
			}
		}
		if c.Flags["--model"] != router.Flags["--model"] || c.Flags["--model"] == "" {
			p.add("%s --model %q differs from the router's %q", role, c.Flags["--model"], router.Flags["--model"])
		}
		// $(VAR) references in args must be defined env vars, or Kubernetes leaves them as is.
		env := map[string]bool{}
		for _, e := range list(c.C["env"]) {
			env[str(get(e, "name"))] = true
		}
		for _, a := range list(c.C["args"]) {
			for _, m := range regexp.MustCompile(`\$\(([A-Z_][A-Z0-9_]*)\)`).FindAllStringSubmatch(str(a), -1) {
				if !env[m[1]] {
					p.add("%s: arg %q uses undefined env %s", role, str(a), m[1])
				}
			}
		}
		envVal := func(name string) string {
			for _, e := range list(c.C["env"]) {
				if str(get(e, "name")) == name {
					return str(get(e, "value"))
				}
			}
			return ""
		}
		if envVal("UCX_TLS") != c.Flags["--ucx-tls"] || envVal("UCX_TLS") == "" {
			p.add("%s: UCX_TLS %q != --ucx-tls %q", role, envVal("UCX_TLS"), c.Flags["--ucx-tls"])
		}
		if envVal("UCX_NET_DEVICES") != c.Flags["--ucx-net-devices"] {
			p.add("%s: UCX_NET_DEVICES %q != --ucx-net-devices %q", role, envVal("UCX_NET_DEVICES"), c.Flags["--ucx-net-devices"])
		}
		// /dev/shm from a Memory emptyDir with a size limit.
		shmVol := ""
		for _, m := range list(c.C["volumeMounts"]) {
			if str(get(m, "mountPath")) == "/dev/shm" {
				shmVol = str(get(m, "name"))
			}
		}
		okShm := false
		for _, v := range list(c.Pod["volumes"]) {
			if str(get(v, "name")) == shmVol && str(get(v, "emptyDir", "medium")) == "Memory" &&
				str(get(v, "emptyDir", "sizeLimit")) != "" {
				okShm = true
			}
		}
		if !okShm {
			p.add("%s: /dev/shm must be a Memory emptyDir with a sizeLimit", role)
		}
		// Drain: preStop, and a grace period longer than the preStop sleep.
		grace := num(str(c.Pod["terminationGracePeriodSeconds"]))
		sleep := list(get(c.C, "lifecycle", "preStop", "exec", "command"))
		if len(sleep) != 2 || str(sleep[0]) != "sleep" || num(str(sleep[1])) >= grace {
			p.add("%s: preStop sleep %v must be shorter than terminationGracePeriodSeconds %d", role, sleep, grace)
		}
		if get(c.Pod, "securityContext", "runAsNonRoot") != true {
			p.add("%s: pod must run as non-root", role)
		}
		gpu := str(get(c.C, "resources", "limits", "nvidia.com/gpu"))
		caps := fmt.Sprint(get(c.C, "securityContext", "capabilities", "add"))
		switch profile {
		case "gpu":
			if !strings.Contains(caps, "IPC_LOCK") {
				p.add("%s: IPC_LOCK capability missing", role)
			}
			if num(gpu) < num(c.Flags["--tensor-parallel-size"]) || gpu != str(get(c.C, "resources", "requests", "nvidia.com/gpu")) {
				p.add("%s: nvidia.com/gpu requests/limits %q vs --tensor-parallel-size %q", role, gpu, c.Flags["--tensor-parallel-size"])
			}
			if c.Flags["--device"] != "cuda" {
				p.add("%s: GPU profile must run the model on the GPUs (--device cuda), got %q", role, c.Flags["--device"])
			}
			startup := asObj(c.C["startupProbe"])
			budget := num(str(startup["periodSeconds"])) * num(str(startup["failureThreshold"]))
			if budget < 900 {
				p.add("%s: startup probe budget %ds is too short to load DeepSeek-V4-Flash", role, budget)
			}
		case "cpu":
			if c.Flags["--device"] != "cpu" {
				p.add("%s: CPU profile must run --device cpu, got %q", role, c.Flags["--device"])
			}
			if gpu != "" || str(get(c.C, "resources", "requests", "nvidia.com/gpu")) != "" {
				p.add("%s: CPU profile requests nvidia.com/gpu", role)
			}
			if c.Flags["--ucx-tls"] != "tcp" {
				p.add("%s: CPU profile needs --ucx-tls tcp, got %q", role, c.Flags["--ucx-tls"])
			}
			if !strings.Contains(c.Flags["--model"], "tiny-dsv4-dspark") {
				p.add("%s: CPU profile should serve the tiny model, got %q", role, c.Flags["--model"])
			}
		}
	}
	decode := byRole["decode"]
	if profile == "gpu" {
		if decode.Flags["--tensor-parallel-size"] != "8" || str(get(decode.C, "resources", "limits", "nvidia.com/gpu")) != "8" {
			p.add("decode must default to 8 GPUs and --tensor-parallel-size 8")
		}
	} else if decode.Flags["--tensor-parallel-size"] != "1" {
		// The tiny model's 4 heads give CPU ranks nothing worth the threads' barriers.
		p.add("CPU decode should run the tiny model on one rank (--tensor-parallel-size 1)")
	}
	if decode.Flags["--spec-method"] == "" {
		p.add("decode has no --spec-method")
	}
	if profile == "cpu" && strings.Contains(manifestText(files), "nvidia.com/gpu") {
		p.add("CPU manifests mention nvidia.com/gpu")
	}

	// Services and PDBs select pods, and named target ports exist on them.
	for _, d := range docs {
		switch d.Kind {
		case "Service":
			sel := asObj(get(d.Body, "spec", "selector"))
			var target *container
			for i := range cs {
				if podLabelsMatch(docs, cs[i].Workload, sel) {
					target = &cs[i]
				}
			}
			if target == nil {
				p.add("Service %s selects no pod", d.Name)
				continue
			}
			for _, port := range list(get(d.Body, "spec", "ports")) {
				tp := str(get(port, "targetPort"))
				if _, err := strconv.Atoi(tp); err != nil && containerPort(target.C, tp) == "" {
					p.add("Service %s targetPort %q is not a port of %s", d.Name, tp, target.Workload)
				}
			}
		case "PodDisruptionBudget":
			sel := asObj(get(d.Body, "spec", "selector", "matchLabels"))
			found := false
			for _, c := range cs {
				found = found || podLabelsMatch(docs, c.Workload, sel)
			}
			if !found {
				p.add("PodDisruptionBudget %s selects no pod", d.Name)
			}
		case "Deployment", "StatefulSet":
			if !labelsMatch(asObj(get(d.Body, "spec", "selector", "matchLabels")), asObj(get(d.Body, "spec", "template", "metadata", "labels"))) {
				p.add("%s %s selector does not match its pod labels", d.Kind, d.Name)
			}
			if d.Kind == "StatefulSet" {
				svc := str(get(d.Body, "spec", "serviceName"))
				ok := false
				for _, s := range docs {
					ok = ok || (s.Kind == "Service" && s.Name == svc && str(get(s.Body, "spec", "clusterIP")) == "None")
				}
				if !ok {
					p.add("StatefulSet %s serviceName %q is not a headless Service", d.Name, svc)
				}
			}
		case "ConfigMap":
			if str(get(d.Body, "metadata", "labels", "grafana_dashboard")) != "1" {
				p.add("ConfigMap %s lacks the grafana_dashboard: \"1\" label", d.Name)
			}
			checkDashboardConfigMap(p, d, dashboardPath)
		}
	}
}

func workload(docs []doc, name string) obj {
	for _, d := range docs {
		if d.Kind+"/"+d.Name == name {
			return d.Body
		}
	}
	return nil
}

func podLabelsMatch(docs []doc, workload string, sel obj) bool {
	for _, d := range docs {
		if d.Kind+"/"+d.Name == workload {
			return labelsMatch(sel, asObj(get(d.Body, "spec", "template", "metadata", "labels")))
		}
	}
	return false
}

// The ConfigMap must carry exactly deploy/grafana's dashboard (the chart links to it).
func checkDashboardConfigMap(p *problems, d doc, path string) {
	var inMap, onDisk interface{}
	data := asObj(get(d.Body, "data"))
	if len(data) != 1 {
		p.add("ConfigMap %s should hold one dashboard, has %d keys", d.Name, len(data))
		return
	}
	for _, v := range data {
		if err := json.Unmarshal([]byte(str(v)), &inMap); err != nil {
			p.add("ConfigMap %s: dashboard is not JSON: %v", d.Name, err)
			return
		}
	}
	if path == "" {
		return
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		p.add("%v", err)
		return
	}
	if err := json.Unmarshal(raw, &onDisk); err != nil {
		p.add("%s: %v", path, err)
		return
	}
	a, _ := json.Marshal(inMap)
	b, _ := json.Marshal(onDisk)
	if !bytes.Equal(a, b) {
		p.add("ConfigMap %s dashboard differs from %s", d.Name, path)
	}
}
