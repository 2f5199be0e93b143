//go:build tools

// Package tools pins controller-gen in this module's go.mod (go run sigs.k8s.io/controller-tools/cmd/controller-gen).
package tools

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
