// How often rules are synced when nobody set a minimum. kube-proxy waits at
// least minSyncPeriod (1 s by default) between syncs because each of its
// syncs costs a great deal; under steady churn that second, not the sync, is
// most of a change's latency. kpng's syncs cost what the change costs, so
// they are paced by that cost instead: after work that took c ms the next
// round waits as long again, so recomputing and syncing take at most half
// of a core whatever the rate of changes, and a cheap sync follows a change
// at once. A minSyncPeriod an operator sets is honoured as kube-proxy does.

/** the share of one core that back-to-back syncs may take */
export const SYNC_CPU_SHARE = 0.5;

/** the pause after a round of work that took `costMs`, so that such rounds take at most `share` of a core */
export const pauseAfter = (costMs: number, share = SYNC_CPU_SHARE): number => (costMs * (1 - share)) / share;
