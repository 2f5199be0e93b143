// Package podtemplate holds one type whose only purpose is to let controller-gen write the
// structural OpenAPI schema of a core/v1 PodSpec, exactly as Kubernetes' own types define it.
// tools/crdgen/gen.sh splices that schema into manifests/crds/horus.io_dljobs.yaml as
// spec.template.spec. Nothing imports this package.
//
// +groupName=crdgen.horus.io
// +versionName=v1
package podtemplate

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Holder carries a PodSpec.
//
// +kubebuilder:object:root=true
type Holder struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec corev1.PodSpec `json:"spec"`
}
