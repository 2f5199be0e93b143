// Built by tools/controlplane/build.sh: a copy of upstream k8s.io/kubernetes/cmd/kube-scheduler/scheduler.go
// (Apache-2.0), so the binary can be built from the Go module proxy without a checkout.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version" // for version metric registration
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	command := app.NewSchedulerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
