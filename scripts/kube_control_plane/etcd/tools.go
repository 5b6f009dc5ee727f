//go:build tools

package etcdbuild

import _ "go.etcd.io/etcd/server/v3"
