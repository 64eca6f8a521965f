package main

// Every flag a container passes must be one its binary accepts: `<binary> --help` lists
// them (CLI11 style, "--name"). Binaries that are not built yet make the test SKIP after
// the ones that exist have been checked.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"time"
)

var helpFlag = regexp.MustCompile(`--[A-Za-z0-9][A-Za-z0-9_-]*`)

func helpFlags(binary string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "--help").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s --help: %v\n%s", binary, err, out)
	}
	set := map[string]bool{}
	for _, f := range helpFlag.FindAllString(string(out), -1) {
		set[f] = true
	}
	return set, nil
}

func checkFlags(base RenderOptions, binDir string) int {
	var p problems
	missing := map[string]bool{}
	checked := map[string]bool{}
	help := map[string]map[string]bool{}
	// Both shipped configurations: the defaults and the CPU overrides.
	for _, extra := range [][]string{nil, {filepath.Join(base.ChartDir, "values-cpu.yaml")}} {
		opts := base
		opts.ValueFiles = append(append([]string{}, base.ValueFiles...), extra...)
		files, err := render(opts)
		if err != nil {
			die(err)
		}
		docs := parseDocs(&p, files)
		for _, c := range containers(docs) {
			cmd := list(c.C["command"])
			if len(cmd) == 0 {
				p.add("%s: container has no command", c.Workload)
				continue
			}
			name := filepath.Base(str(cmd[0]))
			binary := filepath.Join(binDir, name)
			if _, err := os.Stat(binary); err != nil {
				missing[name] = true
				continue
			}
			if help[name] == nil {
				set, err := helpFlags(binary)
				if err != nil {
					p.add("%v", err)
					continue
				}
				help[name] = set
			}
			for _, f := range c.Order {
				if !help[name][f] {
					p.add("%s passes %s, which `%s --help` does not list", c.Workload, f, name)
				}
			}
			checked[name] = true
		}
	}
	if len(p.list) > 0 {
		p.exit("flags") // exits 1
	}
	names := func(m map[string]bool) []string {
		var l []string
		for k := range m {
			l = append(l, k)
		}
		sort.Strings(l)
		return l
	}
	fmt.Printf("flags accepted by: %v\n", names(checked))
	if len(missing) > 0 {
		fmt.Printf("SKIP: not built yet in %s: %v\n", binDir, names(missing))
		return skipCode
	}
	fmt.Println("PASS flags")
	return 0
}
