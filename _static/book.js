// Printed output wraps at the column edge (book.css), except a table printed as text (rows of columns
// separated by runs of spaces, e.g. a DataFrame's repr): wrapped, its columns would no longer line up, so
// it keeps its lines and scrolls. tests/test_browser.py uses the same rule to find such tables.
// In a table cell whose words are numbers ("1.1e-07", "13.8x (16.0x)"), a line may break between the
// numbers but never inside one (the browser would break "1.1e-07" after its minus sign).
document.addEventListener("DOMContentLoaded", () => {
  const isRow = (line) => (line.match(/\S {2,}(?=\S)/g) || []).length >= 2;
  for (const pre of document.querySelectorAll("div.cell_output pre, div.output pre")) {
    if (pre.textContent.split("\n").filter(isRow).length >= 3) pre.classList.add("text-table");
  }
  const number = /^[-+−(]?[\d.,]+(e[-+]?\d+)?[x%)]*$/;
  for (const cell of document.querySelectorAll("article td")) {
    const words = cell.textContent.trim().split(/\s+/);
    if (cell.children.length === 0 && words.some((w) => number.test(w) && /[-e]/.test(w.slice(1)))) {
      cell.replaceChildren(...words.flatMap((w, i) => {
        const span = document.createElement("span");
        span.className = "number";
        span.textContent = w;
        return i ? [" ", span] : [span];
      }));
    }
  }
});
