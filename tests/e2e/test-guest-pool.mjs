// The host `local` those pools run on: this machine's test libvirtd, its volumes in a
// storage pool of their own at `dir`, room for `guests` small guests.
export function testGuestHost(storagePool, dir, guests) {
  return [
    '  - name: local',
    '    uri: qemu:///system',
    `    vcpus: ${guests}`,
    `    memory_mib: ${guests * 1024}`,
    `    max_guests: ${guests}`,
    `    storage_pool: ${storagePool}`,
    `    storage_dir: ${dir}`,
    '',
  ].join('\n');
}

// A pool of the test guest (images/test-guest) as the end-to-end tests and the benchmarks
// write it: the image's kernel and initrd beside it, the arch's console and firmware, no
// network, one small guest on the host `local`, the stand-in runner. `keys` adds the
// pool's other keys, one "key: value" each.
export function testGuestPool(name, arch, dir, keys = []) {
  const ppc = arch === 'ppc64le';
  return [
    `  - name: ${name}`,
    `    labels: [${name}]`,
    `    arch: ${arch}`,
    `    image: ${dir}/base.qcow2`,
    `    kernel: ${dir}/kernel`,
    `    initrd: ${dir}/initrd`,
    `    cmdline: "${ppc ? 'console=hvc0' : 'console=ttysclp0'} quiet"`,
    `    firmware: ${ppc ? 'vof' : 'default'}`,
    '    network: none',
    '    disk_mib: 64',
    '    vcpus: 1',
    '    memory_mib: 512',
    ...keys.map((k) => `    ${k}`),
    '    runner_command: [/usr/bin/fake-runner]',
    '    hosts: [local]',
    '',
  ].join('\n');
}
