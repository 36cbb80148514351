// Package e2e holds the tests that run the gossiptrain binary as a user
// does, as etcd's tests/e2e do: the binary is built once from the
// repository (or taken from $GOSSIPTRAIN_BIN), and each test starts its
// processes and checks what they print, write and leave behind.
//
// They run jobs of several peers on loopback (train_test.go: sync, ssp
// and async against one peer alone; churn_test.go: joins, leaves, crashes
// and restarts; chaos_test.go: all of them at random), the cluster, bench
// and launch commands (cluster_test.go, bench_test.go, launch_test.go over
// real sshd servers in network namespaces, admission_test.go), peers
// behind NAT routers (nat_test.go), the dashboard in a real browser
// (dashboard_test.go), and training on real data against liblinear and
// scikit-learn (acceptance_test.go, acceptance_defaults_test.go). A test
// whose tools are missing (root, iproute2, sshd, chromium, liblinear, the
// data sets) skips with a message saying what to install; -short skips the
// multi-process tests.
//
// The command line's own tests (flags, help, usage errors, a command's
// output) run in-process in package cli.
package e2e
