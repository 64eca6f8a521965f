package main

func checkDockerfile(p *problems, path, flavor string) {}
