package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// shortHash is the FNV-32a of v's JSON in the characters a name may hold.
func shortHash(v any) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	h := fnv.New32a()
	_, _ = h.Write(raw)
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32())), nil
}

// renderedRole is the part of a role that decides its pods: its replica count and its
// rollout settings do not.
func renderedRole(r *workloadv1alpha1.Role) *workloadv1alpha1.Role {
	c := r.DeepCopy()
	c.Replicas, c.MaxUnavailable, c.Partition = nil, nil, nil
	return c
}

// RoleTemplateHash is the value of RoleTemplateHashLabel for pods built from role r.
func RoleTemplateHash(r *workloadv1alpha1.Role) string {
	h, _ := shortHash(renderedRole(r))
	return h
}

// templateHash is the revision of a template: its role replica counts, role rollout
// settings and gang policy left out. Changing how many replicas a role has scales the role
// inside every group, it does not roll every group.
func templateHash(t *workloadv1alpha1.ServingGroup) (string, error) {
	shape := t.DeepCopy()
	shape.GangPolicy = nil
	for i := range shape.Roles {
		shape.Roles[i] = *renderedRole(&shape.Roles[i])
	}
	return shortHash(shape)
}

// revisionTemplates reads the templates of a ModelServing's revisions from their
// ControllerRevisions, once per reconcile pass: a role replica kept on an older revision
// (below a partition) is rebuilt from the template of that revision, not from the spec.
type revisionTemplates struct {
	c       client.Client
	ms      *workloadv1alpha1.ModelServing
	current string
	loaded  map[string]*workloadv1alpha1.ServingGroup // nil: no usable ControllerRevision
	// rolesOf caches revisionRoles by revision.
	rolesOf map[string]string
}

func newRevisionTemplates(c client.Client, ms *workloadv1alpha1.ModelServing, current string) *revisionTemplates {
	return &revisionTemplates{c: c, ms: ms, current: current, loaded: map[string]*workloadv1alpha1.ServingGroup{}}
}

// role is role r as revision rendered it. The spec's role is used for the current revision,
// and when the revision's ControllerRevision is gone or its role differs in shape (another
// worker count), so that the pod names stay those of the spec.
func (t *revisionTemplates) role(ctx context.Context, revision string, r *workloadv1alpha1.Role) *workloadv1alpha1.Role {
	if revision == "" || revision == t.current {
		return r
	}
	tmpl, seen := t.loaded[revision]
	if !seen {
		tmpl = t.load(ctx, revision)
		t.loaded[revision] = tmpl
	}
	if tmpl == nil {
		return r
	}
	for i := range tmpl.Roles {
		old := &tmpl.Roles[i]
		if old.Name == r.Name && old.WorkerReplicas == r.WorkerReplicas && (r.WorkerReplicas == 0 || old.WorkerTemplate != nil) {
			out := r.DeepCopy()
			out.EntryTemplate, out.WorkerTemplate = old.EntryTemplate, old.WorkerTemplate
			return out
		}
	}
	return r
}

// revisionRoles is the RevisionRolesAnnotation of the pods created under revision: the
// RoleTemplateHash of each of its roles, as role built them ("<role>=<hash>,...", in the
// spec's role order, which validation keeps unique by name).
func (t *revisionTemplates) revisionRoles(ctx context.Context, revision string) string {
	if v, ok := t.rolesOf[revision]; ok {
		return v
	}
	parts := make([]string, 0, len(t.ms.Spec.Template.Roles))
	for i := range t.ms.Spec.Template.Roles {
		r := t.role(ctx, revision, &t.ms.Spec.Template.Roles[i])
		parts = append(parts, r.Name+"="+RoleTemplateHash(r))
	}
	if t.rolesOf == nil {
		t.rolesOf = map[string]string{}
	}
	t.rolesOf[revision] = strings.Join(parts, ",")
	return t.rolesOf[revision]
}

func (t *revisionTemplates) load(ctx context.Context, revision string) *workloadv1alpha1.ServingGroup {
	cr := &appsv1.ControllerRevision{}
	key := client.ObjectKey{Namespace: t.ms.Namespace, Name: fmt.Sprintf("%s-%s", t.ms.Name, revision)}
	logger := log.FromContext(ctx)
	if err := t.c.Get(ctx, key, cr); err != nil {
		logger.V(2).Info("revision template unavailable: building from the spec", "controllerRevision", key.Name, "err", err)
		return nil
	}
	tmpl := &workloadv1alpha1.ServingGroup{}
	if err := json.Unmarshal(cr.Data.Raw, tmpl); err != nil {
		logger.V(2).Info("revision template unreadable: building from the spec", "controllerRevision", key.Name, "err", err)
		return nil
	}
	return tmpl
}
