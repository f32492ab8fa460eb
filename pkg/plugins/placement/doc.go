// Package placement is the placement model the berth-scheduler plugins share: which pods
// form a group and what its minimum is (group.go), the units a group is placed in
// (units.go), what a node has free and what a pod asks for (capacity.go, pool.go), which
// nodes a pod may use as the Filter plugins would judge them (eligibility.go), a simulated
// placement of whole units over a snapshot (simulation.go), a plan for a whole group and
// why a group has none (plan.go), what a preemption would evict (preempt.go), and the
// Model (ledger.go): one profile's ledger of the plans in force for the groups being
// placed, the pods it holds for them and the capacity kept for the oldest blocked group,
// kept by PlanFor. Models (profiles.go) hands each scheduler profile its own Model.
//
// Gang feasibility, topology domain choice and the gang fast path all compute the same
// thing, a plan for a whole group over the free capacity, so they compute it here, once.
// Like the in-tree plugins/helper package, it is a helper, not a plugin: plugins import it,
// never each other, and profile settings (accelerator classes and costs) are handed to the
// profile's Model when the profile is built, never read from globals.
package placement
