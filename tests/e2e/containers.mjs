// The host and pool of the tests on real LXC containers (tests/e2e/containers.sh exports
// ROOTFS, the test root): the test libvirtd's lxc:///, and a trusted container pool of the
// stand-in runner with no network, in runner group 3 of the org pytorch (githubConfig's
// runnerGroupId and org; the double answers for that group with GitHub's example, a group
// restricted to one pinned workflow).
export function lxcHost({ vcpus, guests }) {
  return `  - name: lxc
    uri: lxc:///
    vcpus: ${vcpus}
    memory_mib: ${vcpus * 1024}
    max_guests: ${guests}
`;
}

export function containerPool(name, { max }) {
  return `pools:
  - name: ${name}
    labels: [${name}]
    arch: x86_64
    backend: container
    trusted: true
    network: none
    github_scope: pytorch
    image: ${process.env.ROOTFS}
    vcpus: 1
    memory_mib: 256
    max_runners: ${max}
    boot_timeout_s: 30
    runner_command: [/usr/bin/fake-runner]
    hosts: [lxc]
`;
}
