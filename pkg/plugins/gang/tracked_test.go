package gang

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/plugins/podgroups"
)

// notState are the containers reachable from the plugin that are not per-group (or per-pod,
// per-node) state, so Tracked need not report them: each with why it cannot grow as groups
// come and go.
var notState = map[string]string{
	"Gang.model.onHead": "callbacks registered once, when the profile's plugins are built",
	// The source is reached through the model first (fields are walked in order).
	"Gang.model.groups.handlers": "callbacks registered once, when the profile's plugins are built",
	"Gang.model.groups.onDelete": "callbacks registered once, when the profile's plugins are built",
}

// container is a field of the plugin's state that can grow: a map, a slice or a sync.Map,
// made settable through unsafe (the fields are unexported, some in other packages).
type container struct {
	path string
	v    reflect.Value
}

var syncMapType = reflect.TypeFor[sync.Map]()

// ours is a type of Berth's, whose fields are walked; the state behind other packages' types
// (clients, listers, the framework's handle, the work queue) is theirs.
func ours(t reflect.Type) bool {
	return strings.HasPrefix(t.PkgPath(), "github.com/berth-sh/berth/")
}

// containers walks a struct of Berth's, and the structs of Berth's it holds or points to
// (allocating those not set, so their fields are found too), and lists every map, slice and
// sync.Map field. A struct reached twice (the model and the PodGroup source are shared by
// the plugin and its status writer) is walked once, under its first path. Interfaces, funcs
// and map values are not walked: an interface's state is its implementation's, and what a
// map entry holds goes with the entry.
func containers(v reflect.Value, path string, seen map[uintptr]bool, out *[]container) {
	if seen[v.UnsafeAddr()] {
		return
	}
	seen[v.UnsafeAddr()] = true
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		fv := reflect.NewAt(f.Type, unsafe.Pointer(v.Field(i).UnsafeAddr())).Elem()
		p := path + "." + f.Name
		switch {
		case f.Type == syncMapType, f.Type.Kind() == reflect.Map, f.Type.Kind() == reflect.Slice:
			*out = append(*out, container{path: p, v: fv})
		case f.Type.Kind() == reflect.Struct && ours(f.Type):
			containers(fv, p, seen, out)
		case f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct && ours(f.Type.Elem()):
			if fv.IsNil() {
				fv.Set(reflect.New(f.Type.Elem()))
			}
			containers(fv.Elem(), p, seen, out)
		}
	}
}

// fill puts one (zero) entry in a container; the returned func empties it again.
func fill(c container) (restore func()) {
	old := reflect.New(c.v.Type()).Elem()
	old.Set(c.v)
	switch {
	case c.v.Type() == syncMapType:
		c.v.Addr().Interface().(*sync.Map).Store("entry", struct{}{})
		return func() { c.v.Set(reflect.Zero(syncMapType)) }
	case c.v.Kind() == reflect.Map:
		m := reflect.MakeMap(c.v.Type())
		m.SetMapIndex(reflect.New(c.v.Type().Key()).Elem(), reflect.New(c.v.Type().Elem()).Elem())
		c.v.Set(m)
	default:
		c.v.Set(reflect.Append(reflect.MakeSlice(c.v.Type(), 0, 1), reflect.New(c.v.Type().Elem()).Elem()))
	}
	return func() { c.v.Set(old) }
}

// Every map, slice and sync.Map of the plugin's state (the plugin, its status writer, its
// placement model and PodGroup source), found by reflection, is reported by Tracked: one
// entry put in it raises one of Tracked's counts. The gang-state soak
// (test/integration/gang, TestGangStateStaysBounded) trusts Tracked to list every cache, so
// a new field Tracked does not report would leak unseen; this is what makes that trust
// hold. A container that is not per-group state goes in notState, with the reason.
func TestTrackedReportsEveryContainer(t *testing.T) {
	// Wired as New wires them: one model and one PodGroup source, shared by the plugin, the
	// model and the status writer.
	model, groups := &placement.Model{}, &podgroups.Source{}
	setField(t, reflect.ValueOf(model).Elem(), "groups", reflect.ValueOf(groups))
	g := &Gang{model: model, groups: groups, status: &statusWriter{groups: groups, model: model}}

	var all []container
	containers(reflect.ValueOf(g).Elem(), "Gang", map[uintptr]bool{}, &all)
	require.NotEmpty(t, all)

	empty := g.Tracked()
	for cache, n := range empty {
		require.Zero(t, n, "Tracked reports %s=%d of a plugin that holds nothing", cache, n)
	}
	found := map[string]bool{}
	reportedBy := map[string][]string{} // Tracked's cache → the fields that raise it
	var unreported []string
	for _, c := range all {
		found[c.path] = true
		restore := fill(c)
		var raised []string
		for cache, n := range g.Tracked() {
			if n > empty[cache] {
				raised = append(raised, cache)
				reportedBy[cache] = append(reportedBy[cache], c.path)
			}
		}
		restore()
		_, exempt := notState[c.path]
		switch {
		case len(raised) == 0 && !exempt:
			unreported = append(unreported, fmt.Sprintf("%s (%s)", c.path, c.v.Type()))
		case len(raised) > 0 && exempt:
			t.Errorf("%s is in notState but Tracked reports it (as %v): take it out of notState", c.path, raised)
		}
	}
	sort.Strings(unreported)
	assert.Empty(t, unreported, "the gang plugin's state has containers Tracked does not report, so the gang-state soak "+
		"cannot see them leak: report each in Tracked (and in the soak's caches), or, if it does not grow with groups, "+
		"list it in notState with the reason")
	for path := range notState {
		assert.True(t, found[path], "notState names %s, which the plugin's state no longer has", path)
	}
	// And the other way: every cache Tracked reports is some container's count.
	for cache := range empty {
		assert.NotEmpty(t, reportedBy[cache], "Tracked reports %s, which no container of the plugin's state raises", cache)
	}
	t.Logf("Tracked's caches and the fields behind them: %v", reportedBy)
}

// setField sets an unexported field.
func setField(t *testing.T, v reflect.Value, name string, to reflect.Value) {
	t.Helper()
	f := v.FieldByName(name)
	require.True(t, f.IsValid(), "%s has no field %s", v.Type(), name)
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(to)
}
