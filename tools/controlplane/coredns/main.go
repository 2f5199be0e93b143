// Built by tools/controlplane/build.sh: upstream's coredns.go (github.com/coredns/coredns,
// Apache-2.0) with the plugins the local cluster's Corefile uses (src/horus/devcluster/dns.py)
// instead of all of them, selected the way CoreDNS documents for its own builds (plugin.cfg ->
// dnsserver.Directives). The full list also compiles the AWS, Azure and Google Cloud SDKs
// (route53, azure, clouddns plugins): 12 min 42 s of a cold build here, for nothing the
// cluster runs.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// In the order of upstream's plugin.cfg (core/dnsserver/zdirectives.go): a query passes the
// plugins in this order.
var directives = []string{"reload", "ready", "health", "errors", "cache", "kubernetes"}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
