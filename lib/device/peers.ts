/** The peer matrix: which pairs of devices can reach each other's memory, over what link. */
import { native } from '../binding/native';
import type { PeerLink, NvLinkRate } from '../base/types';

export type { PeerLink, NvLinkRate } from '../base/types';

/**
 * How a pair is joined, for people: "NVLink 4.0 x18 through NVSwitch", "PCIe", "link unknown (no
 * NVML)". Takes a link as peerAccess() gives it, or as an older report kept it (no `nvlinkRate`).
 *
 * @category Devices and streams
 */
export function describeLink(link: Pick<PeerLink, 'linkType' | 'nvlinks' | 'viaNvSwitch'> & { nvlinkRate?: NvLinkRate | null }): string {
  if (link.linkType === 'nvlink') {
    const generation = link.nvlinkRate?.generation ? `${link.nvlinkRate.generation} ` : '';
    return `NVLink ${generation}x${link.nvlinks}${link.viaNvSwitch ? ' through NVSwitch' : ''}`;
  }
  return link.linkType === 'pcie' ? 'PCIe' : 'link unknown (no NVML)';
}

/**
 * The peer matrix: one entry per ordered pair of distinct devices.
 *
 * @category Devices and streams
 */
export function peerAccess(): PeerLink[] {
  return native.peerAccess();
}

/**
 * Enables access from device `from` to `to` now (copies do it lazily); returns whether it is on.
 *
 * @category Devices and streams
 */
export function enablePeerAccess(from: number, to: number): boolean {
  return native.enablePeerAccess(from, to);
}
