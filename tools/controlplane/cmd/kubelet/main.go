// Built by tools/controlplane/build.sh: a copy of upstream k8s.io/kubernetes/cmd/kubelet/kubelet.go
// (Apache-2.0), so the binary can be built from the Go module proxy without a checkout. The
// local cluster's real nodes (horus dev cluster add-nodes --real) run it.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // for client metric registration
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	command := app.NewKubeletCommand(context.Background())
	code := cli.Run(command)
	os.Exit(code)
}
