package rbac

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-sh/berth/internal/systemtest"
)

// The tests in this file run a reconciler of berth-controller (as the shared system runs it:
// the whole manager, as its shipped ServiceAccount) through create, update and delete of the
// objects it acts on, and read what it did from the apiserver's audit log: none of its
// requests may be refused, and the writes each step must cause have to be there, so a
// reconciler that stopped doing its job cannot pass as one that has every permission. A
// request the code starts making is checked without anyone adding it to a list: it is
// either granted or refused.

// writeVerbs are the requests that change something; reads are checked only for refusals
// (a reconciler's informers list and watch before it writes anything).
var writeVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}

// resourceOf names an audited request's target as "group/resource/subresource", the core
// group as "core".
func resourceOf(o *auditv1.ObjectReference) string {
	group := o.APIGroup
	if group == "" {
		group = "core"
	}
	what := group + "/" + o.Resource
	if o.Subresource != "" {
		what += "/" + o.Subresource
	}
	return what
}

// controllerWrites reads from the audit log the writes berth-controller's ServiceAccount made
// that succeeded, in namespace ns or to the cluster-scoped objects named in clusterNames, as
// "verb group/resource[/subresource]" (cluster-scoped ones with " name" after) → how many.
func controllerWrites(t *testing.T, ctrl component, ns string, clusterNames ...string) map[string]int {
	t.Helper()
	user := ctrl.impersonate().UserName
	f, err := os.Open(auditLog)
	require.NoError(t, err, "the apiserver's audit log")
	defer f.Close()
	// Cheap filters before decoding: the log holds every request of the package's tests.
	userJSON := []byte(`"` + user + `"`)
	writes := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, userJSON) {
			continue
		}
		var ev auditv1.Event
		if json.Unmarshal(line, &ev) != nil || ev.ObjectRef == nil || !writeVerbs[ev.Verb] {
			continue
		}
		if ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != user {
			continue
		}
		if ev.ResponseStatus == nil || ev.ResponseStatus.Code >= 300 {
			continue // refusals are audit()'s; conflicts and not-founds changed nothing
		}
		o := ev.ObjectRef
		switch {
		case o.Namespace == ns:
			writes[ev.Verb+" "+resourceOf(o)]++
		case o.Namespace == "" && slices.Contains(clusterNames, o.Name):
			writes[ev.Verb+" "+resourceOf(o)+" "+o.Name]++
		}
	}
	require.NoError(t, sc.Err())
	return writes
}

// drive is one reconciler's run through its objects' life, in a namespace of its own.
type drive struct {
	t            *testing.T
	s            *system
	ns           string
	clusterNames []string // cluster-scoped objects of the test whose writes count
	ctx          context.Context
}

func newDrive(t *testing.T, ns string, clusterNames ...string) *drive {
	s := sharedSystem(t)
	d := &drive{t: t, s: s, ns: ns, clusterNames: clusterNames, ctx: context.Background()}
	_, err := s.kube.CoreV1().Namespaces().Create(d.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("berth-controller's writes in %s: %s", ns, formatWrites(controllerWrites(t, s.components["berth-controller"], ns, clusterNames...)))
		}
	})
	return d
}

// apply creates each manifest's object, as admin, in the drive's namespace (cluster-scoped
// kinds keep none).
func (d *drive) apply(docs ...string) {
	d.t.Helper()
	for _, doc := range docs {
		obj, err := systemtest.Decode(doc)
		require.NoError(d.t, err)
		if !strings.Contains(doc, "kind: OpenModel") && !strings.Contains(doc, "kind: BackendRuntime") {
			obj.SetNamespace(d.ns)
		}
		require.NoError(d.t, d.s.cl.Create(d.ctx, obj), "create %T %s", obj, obj.GetName())
	}
}

// update changes an object as a user would (read, change, write; again on a conflict).
func (d *drive) update(obj client.Object, change func()) {
	d.t.Helper()
	key := client.ObjectKey{Namespace: d.ns, Name: obj.GetName()}
	require.NoError(d.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := d.s.cl.Get(d.ctx, key, obj); err != nil {
			return err
		}
		change()
		return d.s.cl.Update(d.ctx, obj)
	}), "update %T %s", obj, key)
}

// delete deletes an object, as admin, and waits until it is gone (the garbage collector
// removes what it owns).
func (d *drive) delete(obj client.Object, name string) {
	d.t.Helper()
	obj.SetName(name)
	obj.SetNamespace(d.ns)
	require.NoError(d.t, d.s.cl.Delete(d.ctx, obj))
	d.gone(obj, name)
}

// gone waits until an object no longer exists.
func (d *drive) gone(obj client.Object, name string) {
	d.t.Helper()
	err := wait.PollUntilContextTimeout(d.ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(d.s.cl.Get(ctx, client.ObjectKey{Namespace: d.ns, Name: name}, obj)), nil
	})
	require.NoError(d.t, err, "%T %s was not deleted", obj, name)
}

// mark is what berth-controller has written so far, for waitWrites to count from.
func (d *drive) mark() map[string]int {
	d.t.Helper()
	return controllerWrites(d.t, d.s.components["berth-controller"], d.ns, d.clusterNames...)
}

// waitWrites waits until the audit log shows berth-controller made every write of want
// since since (a mark; each at least as often as it appears in want), and fails at the
// first request by a Berth ServiceAccount the apiserver refused: with the roles in force,
// that is a permission missing from manifests/.
func (d *drive) waitWrites(step string, since map[string]int, want ...string) {
	d.t.Helper()
	ctrl := d.s.components["berth-controller"]
	need := map[string]int{}
	for _, w := range want {
		need[w]++
	}
	var got map[string]int
	var missing []string
	lastAudit := time.Time{}
	err := wait.PollUntilContextTimeout(d.ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if time.Since(lastAudit) > 2*time.Second {
			lastAudit = time.Now()
			if _, refused := audit(d.t, d.s.components); len(refused) > 0 {
				return false, fmt.Errorf("the apiserver refused Berth's ServiceAccounts:\n  %s", strings.Join(refused, "\n  "))
			}
		}
		got = controllerWrites(d.t, ctrl, d.ns, d.clusterNames...)
		missing = missing[:0]
		for w, n := range need {
			if got[w]-since[w] < n {
				missing = append(missing, fmt.Sprintf("%s (%d of %d)", w, got[w]-since[w], n))
			}
		}
		sort.Strings(missing)
		return len(missing) == 0, nil
	})
	require.NoError(d.t, err, "%s: berth-controller did not make, as its ServiceAccount, the writes %s; it made (in all) %s",
		step, strings.Join(missing, ", "), formatWrites(got))
	d.t.Logf("%s: berth-controller's writes so far: %s", step, formatWrites(got))
}

// refusedNone checks, at the end of a drive, that no request by a Berth ServiceAccount was
// refused, the deletes' aftermath included.
func (d *drive) refusedNone() {
	d.t.Helper()
	// The reconcilers react to the deletes within moments; give them those moments.
	time.Sleep(2 * time.Second)
	_, refused := audit(d.t, d.s.components)
	require.Empty(d.t, refused, "requests by Berth's ServiceAccounts the apiserver refused")
}

func formatWrites(w map[string]int) string {
	if len(w) == 0 {
		return "none"
	}
	var out []string
	for k, n := range w {
		out = append(out, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(out)
	return "[" + strings.Join(out, ", ") + "]"
}
