'use strict';
// lib/device/peers.ts: peer access between two GPUs and the link between them.
const { cm, describeTwoGpus } = require('../helpers');

describeTwoGpus('peer access and links', () => {
  test('peerAccess reports the link from NVML, consistently', () => {
    for (const p of cm.peerAccess()) {
      expect(['nvlink', 'pcie', 'unknown']).toContain(p.linkType);
      expect(p.nvlinks === null).toBe(p.linkType === 'unknown');
      if (p.linkType === 'nvlink') expect(p.nvlinks).toBeGreaterThan(0);
      if (p.linkType === 'pcie') expect(p.nvlinks).toBe(0);
      const back = cm.peerAccess().find((q) => q.from === p.to && q.to === p.from);
      expect(back.nvlinks).toBe(p.nvlinks);
    }
  });
});
