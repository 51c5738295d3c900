"""Forms of the admin's own pages: several files at once, a new knowledge base's embedding, and
the target of a re-embedding."""

from __future__ import annotations

from dataclasses import replace

from django import forms

from knowledge.embeddings import EmbeddingError
from knowledge.embeddings.registry import PROVIDERS, resolved, settings_config
from knowledge.models import KnowledgeBase
from knowledge.services.knowledge_bases import EDITABLE_FIELDS

PROVIDER_CHOICES = [
    (value, label) for value, label in KnowledgeBase.EmbeddingProvider.choices if value in PROVIDERS
]


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    widget = MultipleFileInput

    def clean(self, data, initial=None):
        files = data if isinstance(data, list | tuple) else [data] if data else []
        if not files and self.required:
            raise forms.ValidationError("Choose or drop at least one file.", code="required")
        # Only the presence of a name is checked here: type, size, emptiness and duplicates are
        # judged per file by the upload service, which names every file it refuses.
        return [file for file in files if getattr(file, "name", "")]


class FolderInput(MultipleFileInput):
    """A folder chooser: the browser sends every file under the chosen folder (folders are
    flattened; each file is judged as an upload)."""

    def __init__(self, attrs=None):
        super().__init__({"webkitdirectory": True, "directory": True, **(attrs or {})})


class UploadForm(forms.Form):
    files = MultipleFileField(label="Files", required=False)
    folder = MultipleFileField(label="Folder", required=False, widget=FolderInput)
    # Web import (knowledge.web): documents fetched from URLs by the worker.
    urls = forms.CharField(
        required=False,
        label="URLs",
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "https://help.example.com/faq"}),
        help_text="One http(s) URL per line; each page is fetched in the background.",
    )
    replace = forms.BooleanField(
        required=False,
        label="Replace",
        help_text="Process a file already in this knowledge base again, and replace an earlier "
        "document of the same file name once the new one is ready.",
    )

    def clean_urls(self) -> list[str]:
        return [line.strip() for line in self.cleaned_data["urls"].splitlines() if line.strip()]

    def clean(self) -> dict:
        data = super().clean()
        data["uploads"] = [*data.get("files", []), *data.get("folder", [])]
        if not data["uploads"] and not data.get("urls") and not self.errors:
            self.add_error("files", "Choose or drop at least one file or a folder, or give a URL.")
        return data


def embedding_config(provider: str, model: str = "", dimensions: int | None = None):
    """The deployment's connection settings (URL, key, timeouts) with another provider/model."""
    base = settings_config()
    return replace(
        base,
        provider=provider,
        model=model if model or provider != base.provider else base.model,
        dimensions=dimensions,
    )


class EmbeddingChoiceMixin:
    """Validates the chosen provider and model by loading them (a provider that cannot load is
    refused here, with its reason, not halfway through the work)."""

    def resolve_embedding(self, provider: str, model: str, dimensions: int | None):
        config = embedding_config(provider, model, dimensions)
        try:
            return resolved(config)
        except EmbeddingError as exc:
            raise forms.ValidationError(str(exc), code="embedding") from exc


class ReembedForm(EmbeddingChoiceMixin, forms.Form):
    provider = forms.ChoiceField(choices=PROVIDER_CHOICES)
    model = forms.CharField(
        required=False,
        max_length=200,
        help_text="Blank: the provider's default (for openai, the EMBEDDING_MODEL setting).",
    )
    dimensions = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=16_000,
        help_text="Blank: what the model produces.",
    )

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        data["config"] = self.resolve_embedding(
            data["provider"], data.get("model", ""), data.get("dimensions")
        )
        return data


class KnowledgeBaseAddForm(EmbeddingChoiceMixin, forms.ModelForm):
    """A new knowledge base records its embedding provider, model and dimension: the
    deployment default unless another is chosen here (change it later with Re-embed)."""

    embedding = forms.ChoiceField(
        choices=[("", "Deployment default"), *PROVIDER_CHOICES],
        required=False,
        label="Embedding provider",
    )
    embedding_model_name = forms.CharField(required=False, max_length=200, label="Model")
    embedding_dims = forms.IntegerField(
        required=False, min_value=1, max_value=16_000, label="Dimensions"
    )

    class Meta:
        model = KnowledgeBase
        fields = ["tenant", *EDITABLE_FIELDS]

    def clean(self):
        data = super().clean()
        data["embedding_config"] = None
        if data.get("embedding"):
            try:
                data["embedding_config"] = self.resolve_embedding(
                    data["embedding"],
                    data.get("embedding_model_name", ""),
                    data.get("embedding_dims"),
                )
            except forms.ValidationError as exc:
                self.add_error("embedding", exc)
        return data
