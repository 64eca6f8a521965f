package main

// Structure checks for the Dockerfiles, which cannot be built here (no Docker engine):
// multi-stage, the right base images, a non-root numeric USER, no toolchain installed in
// the runtime stage, and binary/model paths that agree with the chart's values.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

type instruction struct {
	Op   string // upper-case keyword
	Args string
}

type stage struct {
	From  string // image after ARG substitution
	Name  string
	Instr []instruction
}

// parseDockerfile joins continuation lines, drops comments and splits stages at FROM.
func parseDockerfile(text string) []stage {
	args := map[string]string{}
	var stages []stage
	var logical []string
	cur := ""
	for _, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "#") || (t == "" && cur == "") {
			continue
		}
		if strings.HasSuffix(t, "\\") {
			cur += strings.TrimSuffix(t, "\\") + " "
			continue
		}
		logical = append(logical, cur+t)
		cur = ""
	}
	subst := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	for _, l := range logical {
		if l == "" {
			continue
		}
		parts := strings.SplitN(l, " ", 2)
		in := instruction{Op: strings.ToUpper(parts[0])}
		if len(parts) == 2 {
			in.Args = strings.TrimSpace(parts[1])
		}
		switch {
		case in.Op == "ARG" && len(stages) == 0:
			kv := strings.SplitN(in.Args, "=", 2)
			if len(kv) == 2 {
				args[kv[0]] = kv[1]
			}
		case in.Op == "FROM":
			f := strings.Fields(subst.ReplaceAllStringFunc(in.Args, func(m string) string {
				return args[subst.FindStringSubmatch(m)[1]]
			}))
			s := stage{From: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.Name = f[2]
			}
			stages = append(stages, s)
		case len(stages) > 0:
			stages[len(stages)-1].Instr = append(stages[len(stages)-1].Instr, in)
		}
	}
	return stages
}

var toolchainPkg = regexp.MustCompile(`^(build-essential|gcc.*|g\+\+.*|clang.*|llvm.*|cmake|ninja-build|make|binutils|golang.*|cuda-nvcc.*|.*-dev|.*-devel)$`)

// aptPackages lists the package words of every "apt-get install" in a RUN.
func aptPackages(run string) []string {
	var pkgs []string
	for _, cmd := range regexp.MustCompile(`&&|;|\|`).Split(run, -1) {
		f := strings.Fields(cmd)
		for i := 0; i+1 < len(f); i++ {
			if (f[i] == "apt-get" || f[i] == "apt") && contains(f[i+1:], "install") {
				for _, w := range f[i+1:] {
					if w != "install" && !strings.HasPrefix(w, "-") && w != "apt-get" {
						pkgs = append(pkgs, w)
					}
				}
				break
			}
		}
	}
	return pkgs
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// chartPaths reads the binary paths and the CPU model path from the chart's values.
func chartPaths(chart string) (bins []string, cpuModel string) {
	var v struct {
		Binaries map[string]string `yaml:"binaries"`
		Model    struct {
			Path string `yaml:"path"`
		} `yaml:"model"`
	}
	if data, err := os.ReadFile(filepath.Join(chart, "values.yaml")); err == nil {
		_ = yaml.Unmarshal(data, &v)
	}
	for _, b := range v.Binaries {
		bins = append(bins, b)
	}
	v.Model.Path = ""
	if data, err := os.ReadFile(filepath.Join(chart, "values-cpu.yaml")); err == nil {
		_ = yaml.Unmarshal(data, &v)
	}
	return bins, v.Model.Path
}

func checkDockerfile(p *problems, path, flavor string) {
	data, err := os.ReadFile(path)
	if err != nil {
		p.add("%v", err)
		return
	}
	name := filepath.Base(path)
	stages := parseDockerfile(string(data))
	if len(stages) < 2 {
		p.add("%s: needs a build stage and a runtime stage, has %d", name, len(stages))
		return
	}
	build, final := stages[0], stages[len(stages)-1]
	var buildText, finalRuns strings.Builder
	for _, in := range build.Instr {
		buildText.WriteString(in.Op + " " + in.Args + "\n")
	}
	if build.Name == "" {
		p.add("%s: first stage should be named (FROM ... AS build)", name)
	}
	switch flavor {
	case "cpu":
		if !strings.HasPrefix(build.From, "debian:bookworm") || !strings.HasPrefix(final.From, "debian:bookworm") {
			p.add("%s: CPU stages must be Debian bookworm, got %s and %s", name, build.From, final.From)
		}
		if !strings.Contains(buildText.String(), "scripts/bootstrap.sh") {
			p.add("%s: build stage must install its toolchain with scripts/bootstrap.sh", name)
		}
	case "cuda":
		cuda13 := regexp.MustCompile(`^nvidia/cuda:13\.[0-9.]+-(devel|runtime)-`)
		if m := cuda13.FindStringSubmatch(build.From); m == nil || m[1] != "devel" {
			p.add("%s: build stage must use a CUDA 13 devel image, got %s", name, build.From)
		}
		if m := cuda13.FindStringSubmatch(final.From); m == nil || m[1] != "runtime" {
			p.add("%s: runtime stage must use a CUDA 13 runtime image, got %s", name, final.From)
		}
	}
	if !strings.Contains(buildText.String(), "cmake --build") {
		p.add("%s: build stage does not run cmake --build", name)
	}
	for _, b := range []string{"pdspark-router", "pdspark-prefill", "pdspark-decode"} {
		if !regexp.MustCompile(`stage-runtime\.sh .*\b` + b + `\b`).MatchString(buildText.String()) {
			p.add("%s: %s is not staged for the runtime image", name, b)
		}
	}
	if strings.Contains(final.From, "devel") {
		p.add("%s: runtime stage is based on a devel image", name)
	}

	user, copiedFromBuild := "", false
	var copyDests []string
	for _, in := range final.Instr {
		switch in.Op {
		case "USER":
			user = in.Args
		case "COPY":
			if strings.Contains(in.Args, "--from="+build.Name) {
				copiedFromBuild = true
			}
			f := strings.Fields(in.Args)
			copyDests = append(copyDests, f[len(f)-1])
		case "RUN":
			finalRuns.WriteString(in.Args + "\n")
			for _, pkg := range aptPackages(in.Args) {
				if toolchainPkg.MatchString(pkg) {
					p.add("%s: runtime stage installs build package %s", name, pkg)
				}
			}
		}
	}
	if !copiedFromBuild {
		p.add("%s: runtime stage copies nothing from the build stage", name)
	}
	uid := strings.SplitN(user, ":", 2)[0]
	if user == "" || uid == "0" || uid == "root" || !regexp.MustCompile(`^[0-9]+$`).MatchString(uid) {
		p.add("%s: runtime stage must end with a numeric non-root USER (runAsNonRoot), got %q", name, user)
	}
	// Runtime packages derived from the binaries must pass stage-runtime.sh's toolchain guard.
	script := filepath.Join(filepath.Dir(path), "stage-runtime.sh")
	if s, err := os.ReadFile(script); err != nil || !strings.Contains(string(s), "-dev$") {
		p.add("%s: stage-runtime.sh missing or without its -dev package guard", name)
	}

	// Paths agree with the chart.
	chart := filepath.Join(filepath.Dir(path), "..", "helm", "pdspark")
	bins, cpuModel := chartPaths(chart)
	for _, b := range bins {
		if !contains(copyDests, filepath.Dir(b)+"/") {
			p.add("%s: chart runs %s but the image installs binaries to %v", name, b, copyDests)
		}
	}
	if flavor == "cpu" && !contains(copyDests, cpuModel+"/") {
		p.add("%s: values-cpu.yaml serves %s, which the image does not install (%v)", name, cpuModel, copyDests)
	}
}
