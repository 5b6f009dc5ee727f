//go:build tools

package helmbuild

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
