// MathJax settings for pymdownx.arithmatex (generic mode): \( \) inline, \[ \] display.
// MathJax itself is served from the site (javascripts/mathjax/tex-svg.js, copied from
// the installed package by docs/_hooks.py): no network access is needed.
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true },
  // arithmatex's spans, and the table of contents (where a heading's maths is plain text)
  options: { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex|md-ellipsis" },
  svg: { fontCache: "global" },
};
