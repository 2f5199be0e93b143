// Built by tools/controlplane/build.sh: a copy of upstream k8s.io/kubernetes/cmd/kube-apiserver/apiserver.go
// (Apache-2.0), so the binary can be built from the Go module proxy without a checkout.
// APIServer is the main API server and master for the cluster.
// It is responsible for serving the cluster management API.
package main

import (
	"os"
	_ "time/tzdata" // for timeZone support in CronJob

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
