//go:build tools

// Package tools pins the command scripts/install-k8s builds from this module.
package tools

import _ "go.etcd.io/etcd/server/v3"
