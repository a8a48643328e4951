// Chart.js, registered with only what the tab draws (keeps the bundle small).
import {
  BarController, BarElement, CategoryScale, Chart, Filler, Legend, LinearScale,
  LineController, LineElement, PointElement, Tooltip,
} from "chart.js";

Chart.register(BarController, BarElement, CategoryScale, Filler, Legend, LinearScale,
  LineController, LineElement, PointElement, Tooltip);

Chart.defaults.font.family = 'Roboto, "Segoe UI", "Helvetica Neue", Arial, sans-serif';
Chart.defaults.font.size = 11;
Chart.defaults.color = "#5f6368";
Chart.defaults.animation = false;
Chart.defaults.maintainAspectRatio = false;

const live = new Set();

/** A chart on `canvas`; destroyed by destroyAll() when the view is redrawn. Marks the
 * canvas with data-chart="ready" and the number of data points once drawn. */
export function makeChart(canvas, config) {
  const chart = new Chart(canvas, config);
  live.add(chart);
  const points = config.data.datasets.reduce((n, d) => n + (d.data ? d.data.length : 0), 0);
  canvas.dataset.points = String(points);
  canvas.dataset.chart = "ready";
  return chart;
}

export function destroyAll() {
  for (const c of live) c.destroy();
  live.clear();
}

export { Chart };
