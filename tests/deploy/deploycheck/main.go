// deploycheck: offline checks of deploy/ for CTest.
//
//	deploycheck render     -chart DIR [-f values.yaml]... [-api-versions a,b] [-o out.yaml]
//	deploycheck chart      -chart DIR -profile gpu|cpu [-router-kind K] [-f ...] [-api-versions ...] -dashboard F
//	deploycheck flags      -chart DIR -bin DIR [-f ...]           (exit 77 = skipped)
//	deploycheck dashboard  -dashboard F -metrics docs/metrics.md -rules rules.yml
//	deploycheck dockerfile -cpu F -cuda F
//
// Failures print one line each and exit 1.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

const skipCode = 77 // CTest SKIP_RETURN_CODE

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// problems collects check failures so one run reports all of them.
type problems struct{ list []string }

func (p *problems) add(format string, args ...interface{}) {
	m := fmt.Sprintf(format, args...)
	for _, x := range p.list {
		if x == m {
			return
		}
	}
	p.list = append(p.list, m)
}

func (p *problems) exit(what string) {
	if len(p.list) == 0 {
		fmt.Printf("PASS %s\n", what)
		os.Exit(0)
	}
	for _, m := range p.list {
		fmt.Printf("FAIL %s: %s\n", what, m)
	}
	os.Exit(1)
}

func die(err error) {
	fmt.Fprintln(os.Stderr, "error:", err)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: deploycheck render|chart|flags|dashboard|dockerfile ...")
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	chart := fs.String("chart", "", "chart directory")
	var valueFiles listFlag
	fs.Var(&valueFiles, "f", "values override file (repeatable)")
	apiVersions := fs.String("api-versions", "", "extra Capabilities.APIVersions, comma separated")
	out := fs.String("o", "", "write the rendered manifests here")
	profile := fs.String("profile", "gpu", "gpu or cpu: which expectations apply")
	routerKind := fs.String("router-kind", "Deployment", "router workload kind the values select")
	bin := fs.String("bin", "", "directory with the built binaries")
	dashboard := fs.String("dashboard", "", "Grafana dashboard JSON")
	metricsDoc := fs.String("metrics", "", "docs/metrics.md")
	rules := fs.String("rules", "", "Prometheus rules file")
	cpuDockerfile := fs.String("cpu", "", "CPU Dockerfile")
	cudaDockerfile := fs.String("cuda", "", "CUDA Dockerfile")
	release := fs.String("release", "pdspark", "release name")
	_ = fs.Parse(args)

	opts := RenderOptions{ChartDir: *chart, ValueFiles: valueFiles, ReleaseName: *release,
		Namespace: "serving"}
	if *apiVersions != "" {
		opts.APIVersions = strings.Split(*apiVersions, ",")
	}
	switch cmd {
	case "render":
		files, err := render(opts)
		if err != nil {
			die(err)
		}
		text := manifestText(files)
		if *out != "" {
			if err := os.WriteFile(*out, []byte(text), 0o644); err != nil {
				die(err)
			}
		} else {
			fmt.Print(text)
		}
	case "chart":
		files, err := render(opts)
		if err != nil {
			die(err)
		}
		if *out != "" {
			_ = os.WriteFile(*out, []byte(manifestText(files)), 0o644)
		}
		var p problems
		checkChart(&p, files, *profile, *routerKind, len(opts.APIVersions) > 0, *dashboard)
		p.exit(fmt.Sprintf("chart %s %v", *profile, valueFiles))
	case "flags":
		os.Exit(checkFlags(opts, *bin))
	case "dashboard":
		var p problems
		checkDashboard(&p, *dashboard, *metricsDoc, *rules)
		p.exit("dashboard and rules")
	case "dockerfile":
		var p problems
		checkDockerfile(&p, *cpuDockerfile, "cpu")
		checkDockerfile(&p, *cudaDockerfile, "cuda")
		p.exit("dockerfiles")
	default:
		fmt.Fprintln(os.Stderr, "unknown command", cmd)
		os.Exit(2)
	}
}
