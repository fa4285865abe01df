import { LabIcon } from '@jupyterlab/ui-components';

// An eye over three stacked bars: "watching a cluster".
const svgstr = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M12 3C7 3 3.3 6.1 2 9.5 3.3 12.9 7 16 12 16s8.7-3.1 10-6.5C20.7 6.1 17 3 12 3zm0 10.5a4 4 0 1 1 0-8 4 4 0 0 1 0 8zm0-6a2 2 0 1 0 0 4 2 2 0 0 0 0-4z"/>
    <rect x="3" y="18" width="5" height="3" rx="0.5"/>
    <rect x="9.5" y="18" width="5" height="3" rx="0.5"/>
    <rect x="16" y="18" width="5" height="3" rx="0.5"/>
  </g>
</svg>`;

export const observeIcon = new LabIcon({
  name: 'dask-observe:icon',
  svgstr
});
