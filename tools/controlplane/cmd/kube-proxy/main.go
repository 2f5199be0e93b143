// Built by tools/controlplane/build.sh: a copy of upstream k8s.io/kubernetes/cmd/kube-proxy/proxy.go
// (Apache-2.0), so the binary can be built from the Go module proxy without a checkout. Every
// real node of the local cluster (horus dev cluster add-nodes --real) runs one.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // for client metric registration
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	command := app.NewProxyCommand()
	code := cli.Run(command)
	os.Exit(code)
}
