// The upload drop zone: files dropped on it go into the form's file input (which also works
// on its own, with multi-select), and the chosen names are listed before sending.
(function () {
    "use strict";
    const zone = document.querySelector(".kb-dropzone");
    if (!zone) return;
    const input = zone.querySelector("input[type=file]");
    const list = document.querySelector(".kb-chosen");

    function show() {
        list.replaceChildren();
        Array.from(input.files).forEach(function (file) {
            const item = document.createElement("li");
            item.textContent = file.name + " (" + Math.max(1, Math.round(file.size / 1024)) + " KB)";
            list.appendChild(item);
        });
    }

    ["dragenter", "dragover"].forEach(function (name) {
        zone.addEventListener(name, function (event) {
            event.preventDefault();
            zone.classList.add("kb-dragover");
        });
    });
    ["dragleave", "drop"].forEach(function (name) {
        zone.addEventListener(name, function () { zone.classList.remove("kb-dragover"); });
    });
    zone.addEventListener("drop", function (event) {
        event.preventDefault();
        input.files = event.dataTransfer.files;
        show();
    });
    input.addEventListener("change", show);
    show();  // files chosen before this script ran (or kept by the browser on back)
})();
