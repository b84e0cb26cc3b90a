// Static explorers (posbook.viz.interactive_figure in the book build): each range input picks a position of one
// knob, and the frame drawn at build time for those positions is shown. Frames are listed with the last input
// varying fastest. No kernel, no widget library.
document.addEventListener("DOMContentLoaded", () => {
  for (const explorer of document.querySelectorAll(".posbook-explorer")) {
    const inputs = [...explorer.querySelectorAll("input[type=range]")];
    const frames = [...explorer.querySelectorAll(".posbook-explorer-frame")];
    const show = () => {
      let index = 0;
      for (const input of inputs) {
        index = index * (Number(input.max) + 1) + Number(input.value);
        input.nextElementSibling.textContent = input.dataset.names.split("|")[Number(input.value)];
      }
      frames.forEach((frame, i) => { frame.hidden = i !== index; });
    };
    inputs.forEach((input) => input.addEventListener("input", show));
    show();
  }
});
