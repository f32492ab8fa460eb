// Package placement is the placement model the berth-scheduler plugins share: which pods
// form a group and what its minimum is (group.go), what a node has free and what a pod
// asks for (capacity.go), which nodes a pod may use as the Filter plugins would judge them
// (eligibility.go), a simulated placement of whole units over a snapshot (simulation.go),
// and the plans in force for the groups being placed, including the capacity kept for the
// oldest blocked group (ledger.go, model.go).
//
// Gang feasibility, topology domain choice and the gang fast path all compute the same
// thing, a plan for a whole group over the free capacity, so they compute it here, once.
// Like the in-tree plugins/helper package, it is a helper, not a plugin: plugins import it,
// never each other, and profile settings (accelerator classes and costs) are handed to the
// profile's Model when the profile is built, never read from globals.
package placement
