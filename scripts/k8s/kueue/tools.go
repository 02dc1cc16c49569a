//go:build tools

// Package tools pins the command scripts/install-k8s builds from this module.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
