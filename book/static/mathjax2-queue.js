// The widget manager (@jupyter-widgets/html-manager) typesets widget labels with MathJax 2's
// MathJax.Hub.Queue(["Typeset", MathJax.Hub, element]); the book serves MathJax 3, which has no Hub. This gives it
// one that hands such requests to MathJax 3. Installed at DOMContentLoaded: MathJax 3 is a deferred script, and it
// replaces window.MathJax (any Hub set before it ran) with its own object when it runs, which is before that event.
document.addEventListener("DOMContentLoaded", () => {
  const mathjax = window.MathJax;
  if (mathjax === undefined || mathjax.Hub !== undefined) {
    return;
  }
  mathjax.Hub = {
    Queue(...commands) {
      for (const command of commands) {
        if (Array.isArray(command) && command[0] === "Typeset") {
          mathjax.startup.promise.then(() => mathjax.typesetPromise([command[2]]));
        }
      }
    },
  };
});
