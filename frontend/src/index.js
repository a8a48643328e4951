// Entry point: TensorBoard's plugin iframe imports this module and calls render().
import css from "./style.css";
import { App } from "./app.js";

export async function render() {
  const style = document.createElement("style");
  style.textContent = css;
  document.head.append(style);
  document.title = "Bottleneck";
  const app = new App(document.body);
  app.start();
}
