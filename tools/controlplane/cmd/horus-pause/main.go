// horus-pause is the pod sandbox ("pause") program of the local cluster's real nodes: it holds
// the pod's namespaces, reaps the zombies it inherits as PID 1, and exits on SIGINT/SIGTERM,
// which is all upstream's registry.k8s.io/pause does. It is built here (static, CGO_ENABLED=0)
// because the local cluster pulls nothing from a registry; horus dev images wraps it in an
// image whose only file is /pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		os.Stdout.WriteString("horus-pause\n")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
