// Reports the GitHub runner version baked into a runner image and warns before GitHub
// stops accepting it. Two rules (GitHub changelog, "Self-hosted runner minimum version
// enforcement", 2026):
//   - an absolute floor: a runner older than 2.329.0 cannot register at all, enforced in
//     full from 2026-09-25 (hatcheryd warns at start about such an image too:
//     RUNNER_VERSION_FLOOR in controller/image_manifest.h);
//   - a runner older than GitHub's newest release is refused once that release is 30
//     days old. Images must be rebuilt before then.
//
// usage: node check-runner-version.mjs IMAGE RELEASES_JSON [--now ISO] [--warn-days N]
//   IMAGE          the image's manifest (IMAGE.json, written by build-image.sh), or a
//                  mounted image root: opt/actions-runner/RUNNER_VERSION
//   RELEASES_JSON  GitHub's answer to GET /repos/actions/runner/releases (saved to a file,
//                  or a fixture)
// Exit status: 0 current; 1 warning (falls out of compliance within --warn-days, default
// 7); 2 out of compliance already; 3 bad input.
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args.splice(i, 2)[1] : dflt;
};
const now = new Date(opt('--now', new Date().toISOString()));
const warnDays = Number(opt('--warn-days', '7'));
const [root, releasesFile] = args;
if (!root || !releasesFile) {
  console.error('usage: check-runner-version.mjs IMAGE_ROOT RELEASES_JSON [--now ISO] [--warn-days N]');
  process.exit(3);
}

const parse = (v) => {
  const m = /^v?(\d+)\.(\d+)\.(\d+)$/.exec(String(v).trim());
  if (!m) throw new Error(`not a runner version: ${v}`);
  return m.slice(1).map(Number);
};
const cmp = (a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2];

let mine, releases;
try {
  mine = parse(statSync(root).isDirectory()
    ? readFileSync(join(root, 'opt/actions-runner/RUNNER_VERSION'), 'utf8')
    : JSON.parse(readFileSync(root, 'utf8')).runner_version);
  releases = JSON.parse(readFileSync(releasesFile, 'utf8'))
    .filter((r) => !r.draft && !r.prerelease)
    .map((r) => ({ version: parse(r.tag_name), published: new Date(r.published_at) }))
    .sort((a, b) => cmp(b.version, a.version));
} catch (e) {
  console.error(`check-runner-version: ${e.message}`);
  process.exit(3);
}
const v = (x) => x.join('.');
const FLOOR = [2, 329, 0];
const FLOOR_ENFORCED = new Date('2026-09-25T00:00:00Z');
if (cmp(mine, FLOOR) < 0) {
  const days = Math.floor((FLOOR_ENFORCED - now) / 86400000);
  if (days < 0) {
    console.log(`runner ${v(mine)}: OUT OF COMPLIANCE: GitHub registers no runner older than ${v(FLOOR)} since ${FLOOR_ENFORCED.toISOString().slice(0, 10)}: rebuild the image`);
    process.exit(2);
  }
  if (days <= warnDays) {
    console.log(`runner ${v(mine)}: WARNING: GitHub registers no runner older than ${v(FLOOR)} from ${FLOOR_ENFORCED.toISOString().slice(0, 10)} (${days} days): rebuild the image`);
    process.exit(1);
  }
}
const newer = releases.filter((r) => cmp(r.version, mine) > 0);
if (newer.length === 0) {
  console.log(`runner ${v(mine)}: current`);
  process.exit(0);
}
// The oldest newer release starts the 30-day clock.
const first = newer[newer.length - 1];
const deadline = new Date(first.published.getTime() + 30 * 86400000);
const daysLeft = Math.floor((deadline - now) / 86400000);
if (daysLeft < 0) {
  console.log(`runner ${v(mine)}: OUT OF COMPLIANCE since ${deadline.toISOString().slice(0, 10)} (newest ${v(newer[0].version)}): rebuild the image`);
  process.exit(2);
}
if (daysLeft <= warnDays) {
  console.log(`runner ${v(mine)}: WARNING: GitHub refuses it from ${deadline.toISOString().slice(0, 10)} (${daysLeft} days; newest ${v(newer[0].version)}): rebuild the image`);
  process.exit(1);
}
console.log(`runner ${v(mine)}: behind ${v(newer[0].version)}, accepted until ${deadline.toISOString().slice(0, 10)} (${daysLeft} days)`);
process.exit(0);
