package main

func checkDashboard(p *problems, dashboard, metricsDoc, rules string) {}
