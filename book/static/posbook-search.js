// Search result snippets are cut from a page's text before MathJax typesets it, so inline math would show as raw
// TeX ("16\(T\)"). Snippets read the math's content instead: delimiters, braces and backslashes dropped.
// Sphinx's searchtools.js declares `const Search` at the top level of its script: a global binding, not a property
// of window, so it is reached by name.
(() => {
  const plainMath = (tex) => tex.replace(/\\([A-Za-z]+)/g, "$1").replace(/[{}]/g, "").replace(/\\/g, "");
  const patch = () => {
    if (typeof Search === "undefined" || !Search.htmlToText || Search.htmlToText.posbookPlain) return;
    const original = Search.htmlToText;
    Search.htmlToText = (html, anchor) => original(html, anchor)
      .replace(/\\\(([\s\S]*?)\\\)/g, (_, tex) => plainMath(tex.trim()))
      .replace(/\\\[([\s\S]*?)\\\]/g, (_, tex) => plainMath(tex.trim()))
      .replace(/\$\$([\s\S]*?)\$\$/g, (_, tex) => plainMath(tex.trim()));
    Search.htmlToText.posbookPlain = true;
  };
  patch();
  document.addEventListener("DOMContentLoaded", patch);
})();
